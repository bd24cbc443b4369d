"""OpenAI's error shape: the one home of it, for the self-service API and the gateway's OpenAI
surface (a plain module, so the request path does not import Django REST framework)."""

from __future__ import annotations

from typing import Any


def error_body(
    message: str, type_: str, param: str | None = None, code: str | int | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
