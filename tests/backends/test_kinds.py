"""Every backend kind the admin offers has one profile, and nothing else is taken for one."""

from __future__ import annotations

import pytest

from llmserver.backends.metrics import MetricsReader
from llmserver.backends.spec import BackendSpec
from llmserver.backends.upstream import UpstreamClient
from tenants.backend_kinds import PROFILES, profile
from tenants.models import Backend


def test_the_admin_offers_each_profiled_kind_by_its_label() -> None:
    choices = Backend._meta.get_field("kind").choices
    assert choices == [(kind, p.label) for kind, p in PROFILES.items()]


def test_an_unknown_kind_is_refused_where_a_backend_is_built() -> None:
    with pytest.raises(ValueError, match="unknown backend kind"):
        profile("triton")
    with pytest.raises(ValueError, match="unknown backend kind"):
        UpstreamClient(BackendSpec("b", "triton", "http://127.0.0.1:1"))


def test_a_kind_without_metrics_has_no_reader() -> None:
    with pytest.raises(ValueError, match="exports no metrics"):
        MetricsReader("openai")


def test_the_kinds_that_continue_a_paused_stream() -> None:
    assert {k for k, p in PROFILES.items() if p.resumable} == {"vllm", "sglang", "llamacpp"}
