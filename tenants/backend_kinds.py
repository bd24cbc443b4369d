"""One profile per backend kind: all that the gateway does differently for vLLM, TGI, SGLang,
llama.cpp's server and a plain OpenAI-compatible server, in one place.

The one table of kinds (`PROFILES`): the admin's choices are derived from it (`CHOICES`), so
adding a kind is a profile here, a migration for the changed choices, a fixture exposition under
`tests/backends/fixtures/` and a section in `docs/BACKENDS.md`. It sits beside the models, below
the gateway that reads it, as plain data. Each field says where the kind's own source says so:

- metrics: where waiting, running, KV usage and latencies live in its Prometheus exposition
  (read by `llmserver.backends.metrics`; `docs/BACKENDS.md` has the table).
- priority: how a request-level integer `priority` is read, and what the server answers when it
  does not schedule by one. vLLM serves lower values first and, under its default fcfs policy,
  refuses a non-zero one (V0) or ignores it (V1; see the simulator's `engine_priority`); SGLang
  serves higher values first by default (`--schedule-low-priority-values-first` flips it) and,
  started with `--abort-on-priority-when-disabled`, refuses it; TGI and llama.cpp have none.
- resuming: whether a paused stream can be continued (`continue_final_message`), and how the
  original prompt is counted for its bill (`llmserver.pipeline.resume`).
- capacity: whether the server says how many requests it runs at once (llama.cpp's /props).
- endpoints: what it serves a generation model on when a route does not say (vLLM's OpenAI
  server also serves /v1/responses and Anthropic's /v1/messages: `vllm/entrypoints/openai/
  api_server.py`, `vllm/entrypoints/anthropic/`); an embedding model's route declares its own.
- max_completion_tokens: whether the server reads OpenAI's newer name itself (vLLM's and
  SGLang's `ChatCompletionRequest` do); elsewhere it is sent as `max_tokens`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tenants.endpoints import Endpoint

# What a generation model is served on wherever a kind's profile or a route says nothing else.
GENERATION = frozenset({Endpoint.CHAT, Endpoint.COMPLETIONS})


@dataclass(frozen=True, slots=True)
class KindNames:
    """Where each value lives for one backend kind; the first name present wins."""

    waiting: tuple[str, ...]
    running: tuple[str, ...]
    kv_usage: tuple[str, ...]
    tpot: tuple[str, ...]  # histogram base names
    ttft: tuple[str, ...]
    kv_used_over_total: tuple[str, str] | None = None
    # TPOT from two counters, (seconds, tokens), where there is no latency histogram.
    tpot_counters: tuple[str, str] | None = None
    # Prefill cost: two growing samples, (seconds spent prefilling, prompt tokens computed).
    prefill: tuple[str, str] | None = None

    def families(self) -> frozenset[str]:
        """Every base name read: the exposition's other lines are never parsed."""
        pairs = (*(self.kv_used_over_total or ()), *(self.tpot_counters or ()))
        sums = tuple(n.removesuffix("_sum").removesuffix("_total") for n in self.prefill or ())
        return frozenset(
            (*self.waiting, *self.running, *self.kv_usage, *self.tpot, *self.ttft, *pairs, *sums)
        )


class PromptCount(enum.Enum):
    """How the original prompt of a resumed chat is counted on the server."""

    NONE = "none"
    # POST /tokenize with the messages (vLLM's api_server.py, SGLang's http_server.py).
    TOKENIZE_MESSAGES = "tokenize_messages"
    # POST /apply-template, then /tokenize of that text with special tokens (llama.cpp).
    APPLY_TEMPLATE = "apply_template"


@dataclass(frozen=True, slots=True)
class KindProfile:
    kind: str
    label: str  # the admin's name for it
    metrics: KindNames | None  # None: nothing the gateway reads
    priority_sign: int | None = None  # sent priority = sign * (lower first); None: no field
    priority_refusals: tuple[str, ...] = ()
    prompt_count: PromptCount = PromptCount.NONE
    reads_capacity: bool = False
    endpoints: frozenset[Endpoint] = GENERATION
    max_completion_tokens: bool = False

    @property
    def resumable(self) -> bool:
        """A paused stream is continued (not only restarted before its first token): the
        server continues a final assistant message and can count the original prompt."""
        return self.prompt_count is not PromptCount.NONE


PROFILES = {
    # vLLM renamed gpu_cache_usage_perc and time_per_output_token_seconds; new names first.
    "vllm": KindProfile(
        "vllm",
        "vLLM",
        KindNames(
            waiting=("vllm:num_requests_waiting",),
            running=("vllm:num_requests_running",),
            kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            tpot=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
            ttft=("vllm:time_to_first_token_seconds",),
            # Both observed per finished request (`vllm/v1/metrics/loggers.py`); the tokens
            # leave out what the prefix cache held.
            prefill=(
                "vllm:request_prefill_time_seconds_sum",
                "vllm:request_prefill_kv_computed_tokens_sum",
            ),
        ),
        priority_sign=1,
        priority_refusals=("Priority scheduling is not enabled",),
        prompt_count=PromptCount.TOKENIZE_MESSAGES,
        endpoints=GENERATION | {Endpoint.RESPONSES, Endpoint.MESSAGES},
        max_completion_tokens=True,
    ),
    "tgi": KindProfile(
        "tgi",
        "HuggingFace TGI",
        KindNames(
            waiting=("tgi_queue_size",),
            running=("tgi_batch_current_size",),
            kv_usage=(),
            tpot=("tgi_request_mean_time_per_token_duration",),
            ttft=(),
            kv_used_over_total=("tgi_batch_current_max_tokens", "tgi_batch_max_total_tokens"),
        ),
    ),
    "sglang": KindProfile(
        "sglang",
        "SGLang",
        KindNames(
            waiting=("sglang:num_queue_reqs",),
            running=("sglang:num_running_reqs",),
            kv_usage=("sglang:token_usage",),
            tpot=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
            ttft=("sglang:time_to_first_token_seconds",),
        ),
        priority_sign=-1,
        priority_refusals=("Using priority is disabled",),
        prompt_count=PromptCount.TOKENIZE_MESSAGES,
        max_completion_tokens=True,
    ),
    # llama.cpp (tools/server/server-task.cpp, to_metrics): deferred = tasks waiting for a free
    # slot, processing = busy slots. Its `predicted_tokens_seconds` gauge is reset by every scrape
    # (any scraper's), so TPOT comes from the cumulative counters instead; they grow when a
    # request finishes (server-context.cpp, metrics_on_prediction on slot reset).
    "llamacpp": KindProfile(
        "llamacpp",
        "llama.cpp llama-server",
        KindNames(
            waiting=("llamacpp:requests_deferred",),
            running=("llamacpp:requests_processing",),
            kv_usage=(),
            tpot=(),
            ttft=(),
            tpot_counters=(
                "llamacpp:tokens_predicted_seconds_total",
                "llamacpp:tokens_predicted_total",
            ),
            prefill=("llamacpp:prompt_seconds_total", "llamacpp:prompt_tokens_total"),
        ),
        prompt_count=PromptCount.APPLY_TEMPLATE,
        reads_capacity=True,
    ),
    "openai": KindProfile("openai", "OpenAI-compatible (no metrics)", None),
}
DEFAULT_KIND = "vllm"
# The admin's choices, (kind, label), in the table's order.
CHOICES = [(kind, p.label) for kind, p in PROFILES.items()]


def profile(kind: str) -> KindProfile:
    """The kind's profile; ValueError for a kind nobody wrote one for."""
    try:
        return PROFILES[kind]
    except KeyError:
        raise ValueError(f"unknown backend kind {kind!r}") from None
