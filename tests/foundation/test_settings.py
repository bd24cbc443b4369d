"""Settings: read from the environment, with a clear error for a bad value."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from llmserver.env import database_from_url, env_bool, env_choice, env_float, env_int, redis_url


def test_env_bool_reads_the_usual_spellings(monkeypatch):
    monkeypatch.setenv("FLAG", "yes")
    assert env_bool("FLAG") is True
    monkeypatch.setenv("FLAG", "0")
    assert env_bool("FLAG", True) is False


def test_env_bool_refuses_anything_else(monkeypatch):
    monkeypatch.setenv("FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="FLAG"):
        env_bool("FLAG")


def test_an_unset_or_empty_variable_gives_the_default(monkeypatch):
    monkeypatch.setenv("N", "")
    assert env_int("N", 7) == 7
    monkeypatch.delenv("N")
    assert env_float("N", 0.5) == 0.5


def test_env_int_refuses_text_and_values_below_the_minimum(monkeypatch):
    monkeypatch.setenv("N", "ten")
    with pytest.raises(ImproperlyConfigured, match="N must be an integer"):
        env_int("N", 1)
    monkeypatch.setenv("N", "0")
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("N", 5, minimum=1)


def test_env_choice_names_the_choices(monkeypatch):
    monkeypatch.setenv("UNIT", "bananas")
    with pytest.raises(ImproperlyConfigured, match="requests, tokens"):
        env_choice("UNIT", ("requests", "tokens"), "tokens")


def test_a_postgres_url_becomes_a_postgresql_database():
    db = database_from_url("postgres://u:p%40ss@db.example:5433/llm", base_dir="/x")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "llm",
        "u",
        "p@ss",
        "db.example",
        "5433",
    )


def test_an_absolute_sqlite_path_takes_four_slashes():
    assert (
        database_from_url("sqlite:////tmp/x.sqlite3", base_dir="/srv/app")["NAME"]
        == "/tmp/x.sqlite3"
    )


def test_a_relative_sqlite_path_is_under_the_project():
    assert (
        database_from_url("sqlite:///db.sqlite3", base_dir="/srv/app")["NAME"]
        == "/srv/app/db.sqlite3"
    )


@pytest.mark.parametrize(
    "url", ["mysql://root@localhost/x", "postgres://localhost", "sqlite://", "postgres://h:port/x"]
)
def test_a_bad_database_url_is_refused_with_a_clear_message(url):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_from_url(url, base_dir="/x")


def test_redis_url_must_be_a_redis_url(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "http://localhost:6379")
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        redis_url("REDIS_URL")


def test_settings_load_with_no_environment_at_all(tmp_path):
    import subprocess
    import sys

    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='llmserver.settings'; "
        "django.setup(); from django.conf import settings; "
        "print(settings.DATABASES['default']['ENGINE'], settings.CHANNEL_LAYERS['default']['BACKEND'], settings.DEBUG)"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd="."
    )
    assert out.stdout.split() == [
        "django.db.backends.sqlite3",
        "channels.layers.InMemoryChannelLayer",
        "False",
    ]
    assert "SECRET_KEY is not set" in out.stderr


def test_a_bad_environment_value_stops_start_up_with_the_variable_named():
    import subprocess
    import sys

    code = "import os; os.environ['DJANGO_SETTINGS_MODULE']='llmserver.settings'; import django; django.setup()"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "SCRAPE_INTERVAL": "fast"},
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "SCRAPE_INTERVAL must be a number" in out.stderr


@pytest.mark.django_db
def test_the_operators_prefix_and_batching_settings_reach_the_scheduler(settings):
    from llmserver.conf import gateway_settings
    from llmserver.runtime.config import load_gateway_config

    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "AFFINITY_SLACK": 6,
        "PREFIX_INDEX_BLOCKS": 1000,
        "BATCH_SLACK": 2500.0,
        "BATCH_MIN_BLOCKS": 8,
    }
    config = load_gateway_config(gateway_settings()).scheduler
    assert (config.affinity_slack, config.prefix_index_blocks) == (6, 1000)
    assert (config.batch_slack, config.batch_min_blocks) == (2500.0, 8)
