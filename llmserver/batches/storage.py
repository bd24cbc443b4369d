"""Where the bytes of `/v1/files` lie: one directory (`FILES_DIR`), made on first use.

An uploaded file is `<file id>`; a batch's output grows as `batches/<batch id>/output.jsonl`
and `errors.jsonl`, and those same paths become the output files when the batch ends (nothing
is moved, so a crash cannot lose them between a rename and the database). Names are always
made here, never taken from a client. The directory must never be one a web server serves:
`FileStore` refuses one inside a static files directory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

CHUNK_BYTES = 64 * 1024


class FileStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        _refuse_served(self.root)

    def path(self, storage_name: str) -> Path:
        path = (self.root / storage_name).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"{storage_name!r} is outside the file store")
        return path

    def ensure(self, *parts: str) -> Path:
        """The directory `root/parts...`, created (private to this user) if need be."""
        path = self.root.joinpath(*parts)
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path

    def spool_dir(self) -> Path:
        """For uploads still arriving: on the same file system as the files themselves."""
        return self.ensure("tmp")

    def batch_part(self, batch_id: str, name: str) -> str:
        """The storage name of one of a batch's growing output files (its folder is made with
        the first line written to it)."""
        return f"batches/{batch_id}/{name}"

    def size(self, storage_name: str) -> int:
        try:
            return self.path(storage_name).stat().st_size
        except FileNotFoundError:
            return 0

    def chunks(self, storage_name: str) -> Generator[bytes, None, None]:
        with open(self.path(storage_name), "rb") as f:
            while chunk := f.read(CHUNK_BYTES):
                yield chunk

    def delete(self, storage_name: str) -> None:
        path = self.path(storage_name)
        path.unlink(missing_ok=True)
        parent = path.parent
        if parent != self.root and parent.is_relative_to(self.root / "batches"):
            with contextlib.suppress(OSError):
                parent.rmdir()  # a batch's folder, once its last file is gone


def _refuse_served(root: Path) -> None:
    served = [getattr(settings, "STATIC_ROOT", None), getattr(settings, "MEDIA_ROOT", None)]
    served += list(getattr(settings, "STATICFILES_DIRS", ()))
    for entry in served:
        # A STATICFILES_DIRS entry may be (prefix, path).
        place = entry[1] if isinstance(entry, (tuple, list)) else entry
        if not place:
            continue
        where = Path(os.fspath(place)).resolve()
        if root == where or root.is_relative_to(where):
            raise ImproperlyConfigured(
                f"FILES_DIR ({root}) is inside {where}, which is served as static files: "
                "tenants' files would be public. Choose a directory of its own."
            )
