"""CSV export for every report table, shared by the admin and the self-service API.

Cells hold names that tenants choose (users, models), and a spreadsheet runs a cell that starts
with `=`, `+`, `-` or `@` (or a tab or carriage return) as a formula: `=HYPERLINK(...)` in a
model name would become a link in the operator's spreadsheet. Such text cells get a leading
single quote (OWASP's advice for CSV injection); numbers are written as they are.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from typing import Any

from django.http import HttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """The value as a spreadsheet will take it literally: text that could start a formula is quoted."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_response(
    filename: str, columns: Sequence[str], rows: Iterable[dict[str, Any]]
) -> HttpResponse:
    """A download with one header line, then one line per row in `columns` order."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([safe_cell("" if row.get(c) is None else row.get(c)) for c in columns])
    return response
