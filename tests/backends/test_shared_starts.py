"""A chat's shared start (the messages before its last), remembered by its token blocks: one key
per model and start, none for what has no start, and memory bounded by the blocks held."""

from __future__ import annotations

from llmserver.backends.prompt_tokens import SharedStarts, shared_start_key, tokenize_request

SYSTEM = {"role": "system", "content": "You answer billing questions."}


def chat(question: str, *earlier: dict[str, str]) -> dict[str, object]:
    return {"messages": [SYSTEM, *earlier, {"role": "user", "content": question}]}


def test_questions_after_the_same_start_share_its_key() -> None:
    assert shared_start_key("m", "chat", chat("a")) == shared_start_key("m", "chat", chat("b"))


def test_another_model_or_another_conversation_has_another_key() -> None:
    key = shared_start_key("m", "chat", chat("a"))
    assert shared_start_key("n", "chat", chat("a")) != key
    earlier = {"role": "user", "content": "hello"}
    assert shared_start_key("m", "chat", chat("a", earlier)) != key


def test_a_single_message_or_a_completion_has_no_shared_start() -> None:
    assert shared_start_key("m", "chat", {"messages": [SYSTEM]}) is None
    assert shared_start_key("m", "completions", {"prompt": "x"}) is None


def test_the_shared_start_is_tokenized_without_the_last_message() -> None:
    body = tokenize_request("chat", "up", chat("a"), shared=True)
    assert body == {"model": "up", "messages": [SYSTEM], "add_generation_prompt": False}
    whole = tokenize_request("completions", "up", {"prompt": "x"}, shared=False)
    assert whole == {"model": "up", "prompt": "x"}


def test_memory_is_bounded_by_the_blocks_held_least_recent_out() -> None:
    starts = SharedStarts(max_blocks=10)
    starts.put(b"a", (1, 2, 3, 4))
    starts.put(b"b", (5, 6, 7, 8))
    assert starts.get(b"a") == (1, 2, 3, 4)  # now the most recent
    starts.put(b"c", (9, 10, 11))
    assert (starts.get(b"b"), len(starts)) == (None, 2)


def test_what_else_the_template_renders_is_sent_and_keyed() -> None:
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    with_tools = {**chat("a"), "tools": tools}
    assert shared_start_key("m", "chat", with_tools) != shared_start_key("m", "chat", chat("a"))
    assert tokenize_request("chat", "up", with_tools, shared=True)["tools"] == tools


def test_an_entry_without_blocks_still_counts_against_the_bound() -> None:
    starts = SharedStarts(max_blocks=3)
    for n in range(10):
        starts.put(bytes([n]), ())
    assert len(starts) == 3
