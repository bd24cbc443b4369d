"""The real vLLM's `/v1/messages/count_tokens` through the gateway, with Anthropic's SDK: the
engine's own count (its renderer's tokens of the messages), and no usage row, since nothing is
generated (see llmserver/api/count_tokens.py)."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from llmserver.testing.vllm_server import SERVED_NAME
from tests.real_engines import new_key, rows_when_written, sdk
from tests.vllm.conftest import MODEL

pytestmark = pytest.mark.vllm
MESSAGES = [{"role": "user", "content": "How many tokens does this question take?"}]


def test_anthropics_token_count_is_the_engines_own_and_is_not_billed(gateway, vllm):
    key = new_key(gateway, "count-tokens")
    with anthropic.Anthropic(
        base_url=gateway.url, api_key=key, max_retries=0, timeout=120
    ) as claude:
        count = claude.messages.count_tokens(model=MODEL, messages=MESSAGES)
    direct = httpx.post(
        vllm.url + "/v1/messages/count_tokens",
        json={"model": SERVED_NAME, "messages": MESSAGES},
        timeout=30,
    )
    assert count.input_tokens == direct.json()["input_tokens"] > 0
    # A billed chat after it: once its row is written, the count's would have been too.
    sdk(gateway, key).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=1)
    assert len(rows_when_written(gateway, "count-tokens", 1)) == 1
