"""A multipart upload (`POST /v1/files`) into the file store, by Django's own `MultiPartParser`.

The body has already been spooled whole (bounded) by the consumer; this runs in a worker
thread and streams the `file` part straight into its place in the store, refusing it the moment
it passes the size limit. Only one file is taken; the form's `purpose` comes back with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from django.core.exceptions import SuspiciousOperation
from django.core.files.uploadhandler import FileUploadHandler, SkipFile, StopUpload
from django.http.multipartparser import MultiPartParser, MultiPartParserError

from llmserver.wire.errors import bad_upload, file_too_large, filename_too_long, invalid

FILE_FIELD = "file"
# As `StoredFile.filename` holds it. Django's parser refuses a part whose headers pass 1024
# bytes (`MAX_TOTAL_HEADER_SIZE`) before the name is seen: that is a name too long as well.
MAX_FILENAME_CHARS = 255
_HEADERS_TOO_LONG = "Request max total header size exceeded."


@dataclass(frozen=True, slots=True)
class Upload:
    filename: str
    size: int
    purpose: str


class IntoStore(FileUploadHandler):
    """Writes the form's `file` part to `dest`; any other file part is skipped."""

    def __init__(self, dest: Path, limit: int) -> None:
        super().__init__()
        self.dest, self.limit = dest, limit
        self.out: IO[bytes] | None = None
        self.size = 0
        self.too_large = False
        self.received: str | None = None  # the client's file name, once the part is whole

    def new_file(self, field_name: str, file_name: str, *args: Any, **kwargs: Any) -> None:
        super().new_file(field_name, file_name, *args, **kwargs)
        if field_name != FILE_FIELD or self.out is not None or self.received is not None:
            raise SkipFile()
        self.out = open(self.dest, "wb")  # noqa: SIM115  (closed in file_complete or close)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        assert self.out is not None
        self.size += len(raw_data)
        if self.size > self.limit:
            self.too_large = True
            raise StopUpload(connection_reset=False)
        self.out.write(raw_data)
        return None

    def file_complete(self, file_size: int) -> None:
        self.close()
        self.received = self.file_name or "upload.jsonl"
        return None  # the bytes are in the store already; nothing for request.FILES

    def close(self) -> None:
        if self.out is not None:
            self.out.close()
            self.out = None


def receive_upload(body: IO[bytes], size: int, content_type: str, dest: Path, limit: int) -> Upload:
    """Parse the spooled `body`; the file goes to `dest`. Raises ApiError (and leaves nothing
    at `dest`) for a body that is not a form with one file within `limit` bytes."""
    handler = IntoStore(dest, limit)
    meta = {"CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(size)}
    body.seek(0)
    try:
        form, _ = MultiPartParser(meta, cast(Any, body), [handler]).parse()
    except (MultiPartParserError, SuspiciousOperation, ValueError) as exc:
        handler.close()
        dest.unlink(missing_ok=True)
        if str(exc) == _HEADERS_TOO_LONG:
            raise filename_too_long(MAX_FILENAME_CHARS) from None
        raise bad_upload(str(exc) or type(exc).__name__) from None
    handler.close()
    if handler.too_large:
        dest.unlink(missing_ok=True)
        raise file_too_large(limit)
    if handler.received is None:
        dest.unlink(missing_ok=True)
        raise invalid("'file' is required: a form part named 'file'.", FILE_FIELD)
    purpose = form.get("purpose")
    if not purpose:
        dest.unlink(missing_ok=True)
        raise invalid("'purpose' is required.", "purpose")
    # The name is the client's to see again, never a path here: only its last part is kept.
    name = handler.received.replace("\\", "/").rsplit("/", 1)[-1] or "upload.jsonl"
    if len(name) > MAX_FILENAME_CHARS:
        dest.unlink(missing_ok=True)
        raise filename_too_long(MAX_FILENAME_CHARS)
    return Upload(name, handler.size, str(purpose))
