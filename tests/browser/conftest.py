"""Headless Chromium against a real gateway: the simulator and daphne on loopback, with a
database this module's gateway filled. Each module skips where Chromium or its driver is missing
(`pages.require_chromium`; `make test` installs them from Debian where it may)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from llmserver.testing.processes import Database, GatewayProcess, start_gateway
from simulator.launcher import start_simulator
from tests.browser.pages import CHROMIUM, DRIVER, OUT

if TYPE_CHECKING:
    from selenium import webdriver


FILL = """
from datetime import timedelta
from django.utils import timezone
from tenants.models import Tenant
from tests.reports.usage_data import record
demo = Tenant.objects.get(slug="demo")
now = timezone.now().replace(minute=0, second=0, microsecond=0)
for day in range(14):
    for i, (user, model, band) in enumerate([("alice", "demo-llama", 0), ("bob", "demo-llama", 0),
                                             ("nightly-eval", "demo-mistral", 2)]):
        for n in range((day * 7 + i * 3) % 5 + 1):
            record(f"seed-{day}-{i}-{n}", demo, user, model, now - timedelta(days=day, minutes=n),
                   400 + 50 * n + 30 * day, 200 + 20 * day, band=band,
                   wait=0.05 * (n + 1) * (band * 8 + 1), ttft=0.3 * (n + 1) + band * 2)
"""


@pytest.fixture(scope="module")
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    sim = start_simulator("--max-num-seqs", "2", "--model", "demo-llama")
    database = Database(Path(tmp_path_factory.mktemp("browser")))
    url = database.url
    if url.startswith("sqlite:"):
        # env.database_from_url reads sqlite:////abs as a path relative to the project; until
        # that is fixed, keep the file under the project's gitignored test-output/.
        OUT.mkdir(exist_ok=True)
        name = f"browser-{request.module.__name__.rsplit('.', 1)[-1]}.sqlite3"
        (OUT / name).unlink(missing_ok=True)
        url = f"sqlite:///test-output/{name}"
    gw = start_gateway(url, sim.url, {"SCRAPE_INTERVAL": "0.1"})
    gw.manage("shell", "-c", FILL)
    yield gw
    gw.stop()
    sim.stop()
    database.drop()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    from selenium import webdriver

    profile = tempfile.mkdtemp(prefix="chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1500",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(DRIVER), options=options)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)
