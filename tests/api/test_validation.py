"""Body validation for the OpenAI subset: clear 4xx errors, pass-through of the rest."""

from __future__ import annotations

import pytest

from llmserver.wire.errors import ApiError
from llmserver.wire.validation import TokenLimits, parse_json, validate

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def check(data: dict, kind: str = "chat"):
    return validate(kind, data, TokenLimits(16, 1000))


def error_of(data: dict, kind: str = "chat") -> ApiError:
    with pytest.raises(ApiError) as info:
        check(data, kind)
    return info.value


def test_a_request_without_max_tokens_is_sent_without_one_and_estimated_at_the_default():
    req = check(CHAT)
    assert (req.model, req.stream, req.max_tokens) == ("m", False, 16)
    assert "max_tokens" not in req.body and "max_completion_tokens" not in req.body


def test_a_request_without_max_tokens_is_sent_its_tiers_maximum():
    req = validate("chat", CHAT, TokenLimits(16, 1000, tier=300))
    assert (req.max_tokens, req.body["max_tokens"]) == (300, 300)


def test_asking_more_than_the_tiers_maximum_is_a_400_that_names_the_maximum():
    with pytest.raises(ApiError) as info:
        validate("chat", {**CHAT, "max_tokens": 301}, TokenLimits(16, 1000, tier=300))
    assert (info.value.status, info.value.param) == (400, "max_tokens")
    assert "at most 300" in info.value.message


def test_max_completion_tokens_is_kept_under_its_own_name():
    req = check({**CHAT, "max_completion_tokens": 40})
    assert (req.max_tokens, req.body["max_completion_tokens"]) == (40, 40)
    assert "max_tokens" not in req.body


def test_several_choices_are_estimated_as_that_many_answers():
    req = check({**CHAT, "n": 3, "max_tokens": 10})
    assert (req.n, req.most_output_tokens, req.body["n"]) == (3, 30, 3)


def test_an_embeddings_request_is_counted_by_its_input_and_generates_nothing():
    req = check({"model": "e", "input": ["abcd" * 10, "efgh" * 10]}, "embeddings")
    assert (req.kind, req.stream, req.most_output_tokens) == ("embeddings", False, 0)
    assert req.estimated_prompt_tokens == 20


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": [1, "a"]}, "input"),
        ({"input": [[1], []]}, "input"),
        ({"encoding_format": "hex"}, "encoding_format"),
        ({"dimensions": 0}, "dimensions"),
    ],
)
def test_a_bad_embeddings_field_is_a_400_that_names_it(patch, param):
    error = error_of({"model": "e", "input": "hi", **patch}, "embeddings")
    assert (error.status, error.param) == (400, param)


def test_unknown_fields_pass_through_to_the_backend():
    assert check({**CHAT, "top_k": 5, "repetition_penalty": 1.1}).body["top_k"] == 5


def test_a_client_cannot_set_the_backend_priority_itself():
    assert "priority" not in check({**CHAT, "priority": -100}).body


def test_service_tier_flex_asks_for_the_batch_band():
    assert check({**CHAT, "service_tier": "flex"}).wants_flex
    assert not check({**CHAT, "service_tier": "priority"}).wants_flex


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"model": None}, "model"),
        ({"model": 3}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 10**9}, "max_tokens"),
        ({"max_tokens": "10"}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"stream": "yes"}, "stream"),
        ({"stop": [1, 2]}, "stop"),
        ({"n": 0}, "n"),
        ({"n": 129}, "n"),
        ({"n": 2.0}, "n"),
        ({"user": 42}, "user"),
        ({"service_tier": "gold"}, "service_tier"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_a_bad_field_is_a_400_that_names_it(patch, param):
    error = error_of({**CHAT, **patch})
    assert (error.status, error.type, error.param) == (400, "invalid_request_error", param)
    assert error.body()["error"]["message"]


def test_completions_need_a_prompt():
    assert error_of({"model": "m"}, "completions").param == "prompt"
    assert check({"model": "m", "prompt": ["a", "b"]}, "completions").prompt_chars == 3


def test_stream_options_are_read_when_streaming():
    assert check({**CHAT, "stream": True, "stream_options": {"include_usage": True}}).include_usage


def test_the_same_prompt_start_gives_the_same_prefix_blocks():
    a = check({"model": "m", "prompt": "x" * 600 + "a" * 64}, "completions")
    b = check({"model": "m", "prompt": "x" * 600 + "b" * 64}, "completions")
    assert a.prefix_blocks[:9] == b.prefix_blocks[:9] and a.prefix_blocks != b.prefix_blocks


def test_an_earlier_conversation_is_the_prefix_of_its_next_turn():
    turn = [{"role": "system", "content": "Be brief. " * 30}, {"role": "user", "content": "Hi"}]
    first = check({"model": "m", "messages": turn})
    later = [
        *turn,
        {"role": "assistant", "content": "Hello! " * 20},
        {"role": "user", "content": "Tell me more. " * 10},
    ]
    second = check({"model": "m", "messages": later})
    assert len(first.prefix_blocks) >= 4
    assert second.prefix_blocks[: len(first.prefix_blocks)] == first.prefix_blocks


def test_token_id_prompts_are_prefixed_by_their_ids():
    a = check({"model": "m", "prompt": list(range(100))}, "completions")
    b = check({"model": "m", "prompt": list(range(1, 101))}, "completions")
    assert a.prefix_blocks and a.prefix_blocks[0] != b.prefix_blocks[0]


def test_the_same_text_under_another_role_is_another_prefix():
    as_system = check({"model": "m", "messages": [{"role": "system", "content": "y" * 200}]})
    as_user = check({"model": "m", "messages": [{"role": "user", "content": "y" * 200}]})
    assert as_system.prefix_blocks[0] != as_user.prefix_blocks[0]


@pytest.mark.parametrize("raw", [b"", b"{", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_is_a_400(raw):
    with pytest.raises(ApiError) as info:
        parse_json(raw, "application/json")
    assert info.value.status == 400


def test_a_wrong_content_type_is_a_415():
    with pytest.raises(ApiError) as info:
        parse_json(b"{}", "text/plain")
    assert info.value.status == 415


def test_a_missing_content_type_is_accepted_for_json_bodies():
    assert parse_json(b'{"a": 1}', None) == {"a": 1}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model", "m" * 129),
        ("model", "a\x00b"),
        ("model", "\ud800"),
        ("user", "u" * 129),
        ("user", "a\x00b"),
        ("user", "x\udfff"),
    ],
)
def test_a_model_or_user_that_cannot_be_stored_is_refused(field, value):
    error = error_of({**CHAT, field: value})
    assert (error.status, error.param, error.type) == (400, field, "invalid_request_error")


def test_a_model_of_exactly_the_column_width_is_accepted():
    assert check({**CHAT, "model": "m" * 128}).model == "m" * 128


def test_a_responses_maximum_over_the_tiers_is_refused_under_its_own_name():
    from llmserver.wire.agent_apis import validate_responses

    with pytest.raises(ApiError) as info:
        validate_responses(
            {"model": "m", "input": "hi", "max_output_tokens": 301}, TokenLimits(16, 1000, tier=300)
        )
    assert (info.value.status, info.value.param) == (400, "max_output_tokens")
    assert "'max_output_tokens' must be at most 300" in info.value.message
