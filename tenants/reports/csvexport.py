"""CSV export for every report table, shared by the admin and the self-service API."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from typing import Any

from django.http import HttpResponse


def csv_response(
    filename: str, columns: Sequence[str], rows: Iterable[dict[str, Any]]
) -> HttpResponse:
    """A download with one header line, then one line per row in `columns` order."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
    return response
