"""The operator's management commands."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tenants.models import ApiKey, Backend, Membership, ModelRoute, Tenant, Tier


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_tenant_creates_then_updates(cast):
    run("create_tenant", "initech", "Initech", "--tier", "batch", "--budget", "12.5")
    tenant = Tenant.objects.get(slug="initech")
    assert (tenant.name, tenant.default_tier.name, str(tenant.monthly_budget)) == (
        "Initech",
        "batch",
        "12.5000",
    )
    assert "Updated" in run("create_tenant", "initech", "--tier", "interactive")
    assert Tenant.objects.get(slug="initech").default_tier.name == "interactive"


def test_create_tenant_names_the_known_tiers_when_the_tier_is_unknown(cast):
    with pytest.raises(CommandError, match="known: interactive, batch"):
        run("create_tenant", "initech", "--tier", "gold")


def test_create_api_key_prints_a_secret_that_works_once(cast):
    out = run(
        "create_api_key", "acme", "dave", "--json", "--app-type", "batch", "--models", "llama-*"
    )
    data = json.loads(out)
    key = ApiKey.objects.for_key(data["key"])
    assert key is not None and key.user == "dave" and key.tenant == cast.acme
    assert key.app_type == "batch" and key.allows_model("llama-3") and not key.allows_model("gpt")
    assert data["key"] not in {key.prefix, key.hashed}


def test_create_api_key_sets_expiry_and_tier_override(cast):
    data = json.loads(
        run("create_api_key", "acme", "erin", "--json", "--tier", "batch", "--expires-days", "3")
    )
    key = ApiKey.objects.for_key(data["key"])
    assert key.tier == cast.batch and key.expires_at is not None


def test_create_api_key_refuses_an_unknown_tenant(cast):
    with pytest.raises(CommandError, match="No tenant"):
        run("create_api_key", "nope", "dave")


def test_add_backend_routes_models_with_upstream_names(db):
    run(
        "add_backend",
        "gpu1",
        "http://127.0.0.1:9000",
        "--model",
        "llama:meta/Llama-3",
        "--model",
        "qwen",
    )
    backend = Backend.objects.get(name="gpu1")
    routes = {
        r.public_name: r.effective_upstream_model
        for r in ModelRoute.objects.filter(backend=backend)
    }
    assert routes == {"llama": "meta/Llama-3", "qwen": "qwen"}
    assert backend.effective_metrics_url == "http://127.0.0.1:9000/metrics"


def test_add_backend_declares_the_endpoints_its_routes_serve(db):
    run("add_backend", "emb", "http://127.0.0.1:9000", "--model", "e5", "--endpoints", "embeddings")
    assert ModelRoute.objects.get(public_name="e5").declared_endpoints() == {"embeddings"}


def test_add_backend_refuses_an_unknown_endpoint(db):
    with pytest.raises(CommandError, match="unknown endpoint 'images'"):
        run("add_backend", "x", "http://127.0.0.1:9000", "--model", "m", "--endpoints", "images")


def test_add_backend_refuses_a_bad_url(db):
    with pytest.raises(CommandError, match="not an http"):
        run("add_backend", "gpu1", "ftp://x")


def test_add_backend_sets_where_the_server_publishes_its_kv_events(db):
    run("add_backend", "gpu1", "http://127.0.0.1:9000", "--kv-events-endpoint", "tcp://gpu1:5557")
    assert Backend.objects.get(name="gpu1").kv_events_endpoint == "tcp://gpu1:5557"


@pytest.mark.parametrize("endpoint", ["gpu1:5557", "tcp://*:5557", "tcp://gpu1"])
def test_add_backend_refuses_a_kv_events_endpoint_it_cannot_connect_to(db, endpoint):
    with pytest.raises(CommandError, match="ZeroMQ endpoint"):
        run("add_backend", "gpu1", "http://127.0.0.1:9000", "--kv-events-endpoint", endpoint)


def test_demo_run_twice_prints_the_same_working_keys_and_admin_password(db, tmp_path):
    keys_file = str(tmp_path / "keys.json")
    first = json.loads(run("demo", "--json", "--keys-file", keys_file))
    second = json.loads(run("demo", "--json", "--keys-file", keys_file))
    assert second == first
    assert Tier.objects.count() == 3
    assert ApiKey.objects.filter(tenant__slug="demo").count() == 3
    keys = {k["user"]: ApiKey.objects.for_key(k["key"]) for k in second["keys"]}
    assert keys["alice"].band == 0 and keys["nightly-eval"].band == 2
    assert ModelRoute.objects.get(public_name=second["model"]).backend.name == "simulator"
    from django.contrib.auth import get_user_model

    assert get_user_model().objects.get(username="admin").check_password(first["admin_password"])


def test_demo_reset_makes_new_keys_and_revokes_the_old(db, tmp_path):
    keys_file = str(tmp_path / "keys.json")
    first = json.loads(run("demo", "--json", "--keys-file", keys_file))
    reset = json.loads(run("demo", "--json", "--keys-file", keys_file, "--reset"))
    assert reset["admin_password"] != first["admin_password"]
    assert all(ApiKey.objects.for_key(k["key"]) is None for k in first["keys"])
    assert all(ApiKey.objects.for_key(k["key"]) is not None for k in reset["keys"])
    assert json.loads(run("demo", "--json", "--keys-file", keys_file)) == reset


def test_demo_makes_new_keys_when_the_stored_ones_no_longer_work(db, tmp_path):
    keys_file = tmp_path / "keys.json"
    first = json.loads(run("demo", "--json", "--keys-file", str(keys_file)))
    ApiKey.objects.filter(tenant__slug="demo").delete()
    second = json.loads(run("demo", "--json", "--keys-file", str(keys_file)))
    assert second["keys"] != first["keys"]
    assert all(ApiKey.objects.for_key(k["key"]) is not None for k in second["keys"])
    assert oct(keys_file.stat().st_mode & 0o777) == "0o600"


def test_demo_prints_a_curl_line(db, tmp_path):
    out = run("demo", "--keys-file", str(tmp_path / "k.json"))
    assert "curl -N http://127.0.0.1:8000/v1/chat/completions" in out


def test_demo_prints_the_gateway_url_it_is_given(db, tmp_path):
    out = run(
        "demo", "--keys-file", str(tmp_path / "k.json"), "--gateway-url", "http://127.0.0.1:19200"
    )
    assert "http://127.0.0.1:19200/admin/" in out
    assert "curl -N http://127.0.0.1:19200/v1/chat/completions" in out
    assert ":8000" not in out


def write_spec(tmp_path, spec: dict) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_apply_config_creates_a_missing_tier_and_a_key_on_it(cast, tmp_path):
    spec = {
        "tenant": "acme",
        "tiers": {"gold": {"band": 0, "weight": 2.0}},
        "keys": [["zoe", "gold", "chat"]],
    }
    secrets = json.loads(run("apply_config", write_spec(tmp_path, spec)))
    key = ApiKey.objects.for_key(secrets["zoe"])
    assert key is not None and key.tier.name == "gold" and key.tier.weight == 2.0


def test_apply_config_sets_routes_prices_and_the_fair_share_policy(cast, tmp_path):
    from django.utils import timezone

    from tenants.models import CostRule, FairSharePolicy

    Backend.objects.create(name="gpu-a", base_url="http://127.0.0.1:9")
    spec = {
        "routes": {"dear": {"backend": "gpu-a", "upstream_model": "llama"}},
        "prices": {"dear": [4, 16]},
        "policy": {"unit": "money", "output_weight": 3.0},
    }
    run("apply_config", write_spec(tmp_path, spec))
    route = ModelRoute.objects.get(public_name="dear")
    assert (route.backend.name, route.upstream_model) == ("gpu-a", "llama")
    rule = CostRule.objects.price_at("dear", timezone.now())
    assert rule is not None and (rule.input_per_million, rule.output_per_million) == (4, 16)
    policy = FairSharePolicy.objects.get()
    assert (policy.unit, policy.output_weight) == ("money", 3.0)


def test_apply_config_refuses_a_field_the_policy_does_not_have(cast, tmp_path):
    with pytest.raises(CommandError, match="no field named 'speed'"):
        run("apply_config", write_spec(tmp_path, {"policy": {"speed": 2}}))


def test_the_demo_login_administers_the_demo_tenant(db, tmp_path):
    run("demo", "--json", "--keys-file", str(tmp_path / "keys.json"))
    membership = Membership.objects.get(user__username="admin")
    assert (membership.tenant.slug, membership.role) == ("demo", "admin")
