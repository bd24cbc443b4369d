"""OpenAPI for the self-service API with DRF's own generator.

DRF's `AutoSchema` describes query parameters only through filter backends and responses only
through `get_serializer`; these views are plain `APIView`s, so they name their query and response
serializers and this schema reads them.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.schemas.openapi import AutoSchema

_TYPES = {
    serializers.DateField: {"type": "string", "format": "date"},
    serializers.ChoiceField: {"type": "string"},
    serializers.CharField: {"type": "string"},
}


class SelfServiceSchema(AutoSchema):
    def get_filter_parameters(self, path: str, method: str) -> list[dict[str, Any]]:
        query = getattr(self.view, "query_serializer", None)
        if query is None:
            return []
        params = []
        for name, field in query().fields.items():
            schema: dict[str, Any] = dict(
                next(v for k, v in _TYPES.items() if isinstance(field, k))
            )
            if isinstance(field, serializers.ChoiceField):
                schema["enum"] = list(field.choices)
            params.append(
                {
                    "name": name,
                    "in": "query",
                    "required": False,
                    "description": str(field.help_text or ""),
                    "schema": schema,
                }
            )
        return params

    def get_operation_id(self, path: str, method: str) -> str:
        # DRF pluralises list-like names with `inflection`; these names are chosen, not derived.
        return method.lower() + str(self.operation_id_base)

    def get_serializer(self, path: str, method: str) -> serializers.Serializer[Any] | None:
        response = getattr(self.view, "response_serializer", None)
        return response() if response is not None else None

    def get_responses(self, path: str, method: str) -> dict[str, Any]:
        if getattr(self.view, "csv", False):
            content: dict[str, Any] = {"text/csv": {"schema": {"type": "string"}}}
        else:
            # One report object, not the array DRF assumes for a GET without path parameters.
            serializer = self.get_serializer(path, method)
            assert serializer is not None, "every JSON view names its response_serializer"
            content = {"application/json": {"schema": self.get_reference(serializer)}}
        return {"200": {"description": "", "content": content}}
