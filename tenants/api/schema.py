"""OpenAPI for the self-service API with DRF's own generator.

DRF's `AutoSchema` describes query parameters only through filter backends and responses only
through `get_serializer`; these views are plain `APIView`s, so they name their query and response
serializers and this schema reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.schemas.openapi import AutoSchema, SchemaGenerator

if TYPE_CHECKING:
    from rest_framework.schemas.openapi import _DRFOpenAPISchema  # the stubs' type only

_TYPES = {
    serializers.DateField: {"type": "string", "format": "date"},
    serializers.ChoiceField: {"type": "string"},
    serializers.CharField: {"type": "string"},
    serializers.IntegerField: {"type": "integer"},
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
        return {
            "200": {"description": "", "content": content},
            "400": _error("A query parameter is invalid (OpenAI's error shape, `param` names it)."),
            "401": _error("The API key is missing, invalid, revoked or expired."),
        }

    def get_operation(self, path: str, method: str) -> dict[str, Any]:
        operation: dict[str, Any] = super().get_operation(path, method)
        operation["security"] = [{SECURITY: []}]
        return operation


SECURITY = "apiKey"
ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string", "nullable": True},
                "code": {"type": "string", "nullable": True},
            },
        }
    },
}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


class SelfServiceSchemaGenerator(SchemaGenerator):
    """DRF's generator, plus what its per-view schemas cannot add: the error body they refer to
    and the bearer-key security scheme."""

    def get_schema(self, request: Request | None = None, public: bool = False) -> _DRFOpenAPISchema:
        schema = super().get_schema(request, public)
        components = schema.setdefault("components", {})
        components.setdefault("schemas", {})["Error"] = ERROR
        components["securitySchemes"] = {
            SECURITY: {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key of the tenant: `Authorization: Bearer <API key>`.",
            }
        }
        schema["security"] = [{SECURITY: []}]
        return schema
