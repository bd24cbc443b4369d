"""What a batch may be: the create request, the input file at upload, and each line.

As OpenAI checks them: a file for `batch` is JSONL (one JSON object a line, at most
`BATCH_MAX_LINES`); a batch names one of the four endpoints and the 24h window; at validation
each line must have a unique `custom_id`, `method` POST, a `url` equal to the batch's endpoint
and an object `body` for one model. A bad line fails the whole batch, its errors listing each
bad line. A line's body is checked as its endpoint checks any request when it runs (a bad one
fails that line alone, with the endpoint's 400).
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmserver.wire.errors import invalid, invalid_file
from tenants.endpoints import Endpoint

ENDPOINTS = {
    "/v1/chat/completions": Endpoint.CHAT,
    "/v1/completions": Endpoint.COMPLETIONS,
    "/v1/embeddings": Endpoint.EMBEDDINGS,
    "/v1/responses": Endpoint.RESPONSES,
}
COMPLETION_WINDOWS = {"24h": 24 * 3600}
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512
# A file with thousands of bad lines fails on the first ones; the rest are not listed.
MAX_REPORTED_ERRORS = 100
# How deeply a line's JSON may nest: far past any real request (a tool's JSON schema is a few
# levels), and far below the interpreter's recursion limit, so that a line accepted at upload
# parses again in whichever thread runs it and is encoded again for the engine.
MAX_LINE_DEPTH = 64
# A `\uD800`-`\uDFFF` escape: JSON may carry half a surrogate pair, which no UTF-8 can hold.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


@dataclass(frozen=True, slots=True)
class CreateRequest:
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None


def check_create(data: dict[str, Any]) -> CreateRequest:
    file_id = data.get("input_file_id")
    if not isinstance(file_id, str) or not file_id:
        raise invalid("'input_file_id' is required.", "input_file_id")
    endpoint = data.get("endpoint")
    if endpoint not in ENDPOINTS:
        named = ", ".join(ENDPOINTS)
        raise invalid(f"Invalid 'endpoint': {endpoint!r}; one of {named}.", "endpoint")
    window = data.get("completion_window")
    if window not in COMPLETION_WINDOWS:
        raise invalid(f"Invalid 'completion_window': {window!r}; only '24h'.", "completion_window")
    return CreateRequest(file_id, str(endpoint), str(window), _metadata(data.get("metadata")))


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    ok = isinstance(value, dict) and len(value) <= METADATA_PAIRS
    ok = ok and all(
        isinstance(k, str)
        and isinstance(v, str)
        and len(k) <= METADATA_KEY_CHARS
        and len(v) <= METADATA_VALUE_CHARS
        for k, v in value.items()
    )
    if not ok:
        raise invalid(
            f"'metadata' must be an object of at most {METADATA_PAIRS} string values, keys up "
            f"to {METADATA_KEY_CHARS} characters and values up to {METADATA_VALUE_CHARS}.",
            "metadata",
        )
    return dict(value)


def numbered_lines(path: Path) -> Generator[tuple[int, bytes], None, None]:
    """The file's non-blank lines with their line numbers (from 1), read as they are needed."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.strip()
            if line:
                yield number, line


class BadLine(ValueError):
    """Why a line cannot be read as a request, as the end of a sentence ("it is ...")."""


def parse_line(raw: bytes, max_bytes: int) -> Any:
    """One line's JSON, within bounds: at most `max_bytes` (what a request body may be), UTF-8
    (a byte order mark aside), nested at most `MAX_LINE_DEPTH` deep, and no half surrogate
    pair in its strings. Raises BadLine, never RecursionError."""
    if len(raw) > max_bytes:
        raise BadLine(f"it is longer than {max_bytes} bytes, the most a request body may be")
    try:
        text = raw.decode("utf-8-sig")  # strict: no invalid bytes, no encoded surrogates
    except UnicodeDecodeError:
        raise BadLine("it is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise BadLine(f"it nests deeper than {MAX_LINE_DEPTH} levels") from None
    except ValueError:
        raise BadLine("it is not valid JSON") from None
    # Walking the value costs; a line with few brackets and no surrogate escape needs none.
    deep = raw.count(b"[") + raw.count(b"{") > MAX_LINE_DEPTH
    if deep or _SURROGATE_ESCAPE.search(raw):
        _check_value(data)
    return data


def _check_value(data: Any) -> None:
    """Depth and strings of a parsed value, without recursion."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_LINE_DEPTH:
                raise BadLine(f"it nests deeper than {MAX_LINE_DEPTH} levels")
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadLine("it holds half a surrogate pair, which is no text") from None


def check_jsonl(path: Path, max_lines: int, max_line_bytes: int) -> int:
    """At upload: one JSON object a line (each within `parse_line`'s bounds), at most
    `max_lines` of them; returns how many. Raises ApiError naming the first bad line."""
    count = 0
    for number, line in numbered_lines(path):
        count += 1
        if count > max_lines:
            raise invalid_file(f"it has more than {max_lines} lines, the most a batch takes.")
        try:
            data = parse_line(line, max_line_bytes)
        except BadLine as exc:
            raise invalid_file(f"line {number}: {exc}.") from None
        if not isinstance(data, dict):
            raise invalid_file(f"line {number} is not a JSON object.")
    if count == 0:
        raise invalid_file("it is empty.")
    return count


@dataclass(slots=True)
class Checked:
    """A batch input, checked: how many lines, for which model, and what is wrong with it in
    OpenAI's batch error entries (`code`, `message`, `param`, `line`)."""

    total: int = 0
    model: str = ""
    model_line: int | None = None  # the first line naming the model, for an error about it
    errors: list[dict[str, Any]] = field(default_factory=list)

    def error(self, code: str, message: str, line: int | None, param: str | None = None) -> None:
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append({"code": code, "message": message, "param": param, "line": line})


def check_lines(
    lines: Iterable[tuple[int, bytes]], endpoint: str, max_lines: int, max_line_bytes: int
) -> Checked:
    checked = Checked()
    seen: set[str] = set()
    for number, raw in lines:
        checked.total += 1
        if checked.total > max_lines:
            message = f"The batch input file has more than {max_lines} requests, the most."
            checked.error("too_many_requests", message, None)
            break
        _check_line(checked, seen, number, raw, endpoint, max_line_bytes)
    if checked.total == 0:
        checked.error("empty_file", "The batch input file is empty.", None)
    return checked


def _check_line(
    checked: Checked, seen: set[str], number: int, raw: bytes, endpoint: str, max_bytes: int
) -> None:
    try:
        data = parse_line(raw, max_bytes)
    except BadLine as exc:
        message = f"This line is not parseable as valid JSON: {exc}."
        checked.error("invalid_json_line", message, number)
        return
    if not isinstance(data, dict):
        checked.error("invalid_request", "Each line must be a JSON object.", number)
        return
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        message = "Missing required parameter: 'custom_id' (a non-empty string)."
        checked.error("missing_required_parameter", message, number, "custom_id")
    elif custom_id in seen:
        message = f"The custom_id '{custom_id}' is a duplicate of another request's."
        checked.error("duplicate_custom_id", message, number, "custom_id")
    else:
        seen.add(custom_id)
    if data.get("method") != "POST":
        checked.error(
            "invalid_method", "The method of each request must be POST.", number, "method"
        )
    if data.get("url") != endpoint:
        message = "The URL provided for this request does not match the batch endpoint."
        checked.error("invalid_url", message, number, "url")
    body = data.get("body")
    if not isinstance(body, dict):
        checked.error("invalid_request", "'body' must be a JSON object.", number, "body")
        return
    _check_body(checked, number, body)


def _check_body(checked: Checked, number: int, body: dict[str, Any]) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        message = "Missing required parameter: 'body.model'."
        checked.error("missing_required_parameter", message, number, "body.model")
    elif not checked.model:
        checked.model, checked.model_line = model, number
    elif model != checked.model:
        message = (
            f"Every request of a batch must use one model: '{model}' is not '{checked.model}'."
        )
        checked.error("mismatched_model", message, number, "body.model")
    if body.get("stream") is True:
        message = "Streaming is not supported in a batch."
        checked.error("invalid_request", message, number, "body.stream")
