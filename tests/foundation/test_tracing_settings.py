"""Tracing's settings, read from OpenTelemetry's own variables: off unless they name an exporter
or an endpoint, the endpoint as OpenTelemetry resolves it, a clear error for what cannot work."""

from __future__ import annotations

import os

import pytest
from django.core.exceptions import ImproperlyConfigured

from llmserver.env import otlp_traces_endpoint, traces_exporters

DEFAULT = "http://localhost:4318/v1/traces"


@pytest.fixture(autouse=True)
def no_otel(monkeypatch):
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)


def test_tracing_is_off_with_no_otel_variable():
    assert traces_exporters() == ()
    assert otlp_traces_endpoint(DEFAULT) == DEFAULT


def test_an_otlp_endpoint_turns_tracing_on_and_gets_the_traces_path(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert traces_exporters() == ("otlp",)
    assert otlp_traces_endpoint(DEFAULT) == "http://collector:4318/v1/traces"


def test_the_traces_endpoint_is_taken_as_it_is(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://tempo:4318/otlp/v1/traces")
    assert traces_exporters() == ("otlp",)
    assert otlp_traces_endpoint(DEFAULT) == "http://tempo:4318/otlp/v1/traces"


def test_the_exporters_are_named_by_otel_traces_exporter(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,otlp")
    assert traces_exporters() == ("console", "otlp")


def test_exporter_none_or_the_sdk_disabled_turns_tracing_off_whatever_the_endpoint(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert traces_exporters() == ()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert traces_exporters() == ()


def test_an_exporter_the_gateway_lacks_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ImproperlyConfigured, match="zipkin"):
        traces_exporters()


def test_otlp_over_grpc_is_refused_naming_the_protocol_that_works(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ImproperlyConfigured, match="http/protobuf"):
        traces_exporters()
