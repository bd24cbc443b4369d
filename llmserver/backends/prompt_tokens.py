"""The token blocks of a prompt's shared start, for pools whose backends publish KV cache events.

Those pools key prompts by token blocks (`scheduling.token_block_hashes`), and tokens come from a
backend's `/tokenize`: a round trip per request, which on a busy backend costs more than the
routing gains (docs/BENCHMARKS.md, "KV cache events"). What routing matches is a prompt's shared
start: for a chat, the messages before its last (the system prompt, the conversation so far).
A chat template renders messages one after another, so those messages' tokens begin the whole
prompt's; their blocks less the last (which may straddle into the next message) are the whole
prompt's leading blocks. They are asked for once and remembered, keyed by a hash of the model and
the messages, so a tenant's system prompt costs one round trip rather than one per request. A
completion's prompt, or a chat of one message, is tokenized whole each time. A template that
does not render messages one after another (one that folds the system prompt into the first user
turn) gives a start that is not the prompt's: such a pool's prompts then match nothing, and are
routed by load as if nothing were cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llmserver.backends.upstream import BackendError, UpstreamClient
from scheduling import token_block_hashes

# How long admission waits for a backend's /tokenize before it keys the prompt by characters,
# and how long a backend whose /tokenize failed is not asked again.
TOKENIZE_TIMEOUT = 2.0
TOKENIZE_REST = 10.0
# Answers that say the backend has no /tokenize at all (not the prompt's fault): it rests too.
NO_TOKENIZE = (404, 405, 501)


def _weight(blocks: tuple[int, ...]) -> int:
    return max(1, len(blocks))  # an entry holds memory even without blocks


class SharedStarts:
    """An LRU of shared starts' token blocks, bounded by the blocks it holds in all."""

    def __init__(self, max_blocks: int = 262_144) -> None:
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[bytes, tuple[int, ...]] = OrderedDict()
        self._held = 0

    def get(self, key: bytes) -> tuple[int, ...] | None:
        found = self._blocks.get(key)
        if found is not None:
            self._blocks.move_to_end(key)
        return found

    def put(self, key: bytes, blocks: tuple[int, ...]) -> None:
        old = self._blocks.pop(key, None)
        self._held -= _weight(old) if old is not None else 0
        self._blocks[key] = blocks
        self._held += _weight(blocks)
        while self._held > self.max_blocks and self._blocks:
            _, gone = self._blocks.popitem(last=False)
            self._held -= _weight(gone)

    def learn(self, key: bytes | None, tokens: Sequence[int]) -> tuple[int, ...]:
        """A prompt's leading blocks from the ids `/tokenize` gave: those of a shared start
        (`key` given) less its last, which may straddle into the last message, remembered under
        `key`; those of a whole prompt as they are."""
        blocks = token_block_hashes(tokens)
        if key is not None:
            blocks = blocks[:-1]
            self.put(key, blocks)
        return blocks

    def __len__(self) -> int:
        return len(self._blocks)


# Request fields a chat template renders besides the messages (vLLM's `ChatCompletionRequest`):
# a start tokenized without them would not be the start of what the engine runs.
TEMPLATE_FIELDS = ("tools", "documents", "chat_template", "chat_template_kwargs")


def shared_start_key(model: str, kind: str, body: dict[str, Any]) -> bytes | None:
    """What a request's shared start is remembered by (the public model name, the messages
    before the last and what else the template renders), or None when it has none: a
    completion, or a chat of one message."""
    messages = body.get("messages")
    if kind != "chat" or not isinstance(messages, list) or len(messages) < 2:
        return None
    rendered = [model, messages[:-1], *(body.get(f) for f in TEMPLATE_FIELDS)]
    raw = json.dumps(rendered, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(raw.encode(), digest_size=16).digest()


def tokenize_request(kind: str, model: str, body: dict[str, Any], shared: bool) -> dict[str, Any]:
    """The `/tokenize` request for `model` (the backend's name for it): the shared start alone,
    or the whole prompt, with what else the template renders."""
    if kind != "chat":
        return {"model": model, "prompt": body.get("prompt")}
    out = {f: body[f] for f in TEMPLATE_FIELDS if body.get(f) is not None}
    if shared:
        return out | {
            "model": model,
            "messages": body["messages"][:-1],
            "add_generation_prompt": False,
        }
    return out | {"model": model, "messages": body.get("messages"), "add_generation_prompt": True}


class PromptKeyer:
    """The prompt's leading token blocks, for a model whose pool has backends publishing their
    KV cache events (their blocks are tokens): a chat's shared start from memory when it was
    tokenized before. None elsewhere, or when /tokenize fails (the prompt keeps its character
    blocks: it is still routed, by the routing history). A backend whose /tokenize failed (not
    a 4xx: the prompt's own fault) rests for TOKENIZE_REST seconds, and the next of the pool's
    is asked meanwhile. A prompt too short to fill a block keeps its character blocks."""

    def __init__(
        self, client: Callable[[str], UpstreamClient | None], clock: Callable[[], float]
    ) -> None:
        self._client = client
        self._clock = clock
        self.shared_starts = SharedStarts()
        # public model -> the backends (and their model name) whose /tokenize can key it
        self.via: Mapping[str, tuple[tuple[str, str], ...]] = {}
        self.resting: dict[str, float] = {}  # backend -> when its /tokenize is asked again

    async def token_blocks(
        self, model: str, kind: str, body: dict[str, Any], request_id: str
    ) -> tuple[int, ...] | None:
        candidates = self.via.get(model, ())
        if not candidates:
            return None
        key = shared_start_key(model, kind, body)
        if key is not None and (known := self.shared_starts.get(key)) is not None:
            return known or None
        now = self._clock()
        via = next((c for c in candidates if self.resting.get(c[0], 0.0) <= now), None)
        client = self._client(via[0]) if via is not None else None
        if via is None or client is None:
            return None
        request = tokenize_request(kind, via[1], body, shared=key is not None)
        try:
            _, data = await asyncio.wait_for(
                client.complete("/tokenize", request, request_id=request_id), TOKENIZE_TIMEOUT
            )
        except (BackendError, TimeoutError) as exc:
            status = exc.status if isinstance(exc, BackendError) else None
            if status is None or status >= 500 or status in NO_TOKENIZE:
                self.resting[via[0]] = self._clock() + TOKENIZE_REST
            return None
        tokens = data.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return None
        # Too short to fill a block: the character blocks stay.
        return self.shared_starts.learn(key, tokens) or None
