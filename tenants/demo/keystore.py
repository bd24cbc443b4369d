"""The demo's secrets, kept in a git-ignored local file so `make run` prints the same keys again.

Secrets are never stored in the database (only their hashes), so the only way to print a key a
second time is to keep it somewhere: here, a file readable by its owner only. A stored key is
reused only while the database still accepts it; a fresh database or `--reset` makes new ones.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from django.conf import settings

DEFAULT_FILE_NAME = ".demo-keys.json"


def default_path() -> Path:
    return Path(settings.BASE_DIR) / DEFAULT_FILE_NAME


@dataclass
class DemoSecrets:
    keys: list[dict[str, str]] = field(default_factory=list)
    admin_password: str | None = None


def load(path: Path) -> DemoSecrets:
    """What the last run stored, or nothing (missing or unreadable file: start over)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return DemoSecrets()
    if not isinstance(data, dict):
        return DemoSecrets()
    keys = data.get("keys")
    password = data.get("admin_password")
    return DemoSecrets(
        keys=[k for k in keys if isinstance(k, dict)] if isinstance(keys, list) else [],
        admin_password=password if isinstance(password, str) else None,
    )


def save(path: Path, secrets: DemoSecrets) -> None:
    """Written owner-only (0600) and replaced atomically, so a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(secrets), out, indent=2)
    os.replace(tmp, path)
