"""The Responses API's state, kept by the gateway: each response it returned, whose it is, and
the conversation it ends.

vLLM keeps one in-memory store for every caller of an engine (`VLLM_ENABLE_RESPONSES_API_STORE`;
`response_store` and `msg_store` in `vllm/entrypoints/openai/responses/serving.py`), so behind a
shared engine one tenant could chain from another's response. The gateway never lets the engine
store (it sends `store: false`) and keeps this row instead: `previous_response_id` is resolved
here, as its caller sees it (`tenants/visibility.py`), and expanded into the input it sends.
"""

from __future__ import annotations

from django.db import models

from tenants.models.keys import ApiKey
from tenants.models.tenants import Tenant


class StoredResponse(models.Model):
    id = models.CharField(primary_key=True, max_length=64, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="responses")
    user = models.CharField(max_length=128, help_text="The user of the key that made it.")
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="responses"
    )
    model = models.CharField(max_length=128)
    conversation = models.JSONField(
        help_text="The input items of a request that continues this response: every earlier "
        "turn's input and output, then this one's (instructions are not carried over)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(help_text="After this it is not found, and pruned.")

    class Meta:
        verbose_name = "stored response"
        indexes = [models.Index(fields=["expires_at"], name="response_expiry")]

    def __str__(self) -> str:
        return self.id
