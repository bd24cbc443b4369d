"""Headless Chromium: log into the admin, read the usage report, watch the dashboard go live.

Real processes only: the simulator and daphne on loopback with a database this test filled, and
the live update comes from the gateway runtime itself, publishing scheduler snapshots while real
completions run through it. Screenshots go to test-output/ (and to docs/img/ for the README
with UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmserver.testing.processes import ROOT, Database, GatewayProcess, start_gateway
from simulator.launcher import start_simulator

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
OUT = ROOT / "test-output"
DOCS = ROOT / "docs" / "img"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
    pytest.skip(
        "chromium/chromedriver missing: apt-get install -y chromium chromium-driver",
        allow_module_level=True,
    )

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.e2e

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
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    sim = start_simulator("--max-num-seqs", "2", "--model", "demo-llama")
    database = Database(Path(tmp_path_factory.mktemp("browser")))
    url = database.url
    if url.startswith("sqlite:"):
        # env.database_from_url reads sqlite:////abs as a path relative to the project; until
        # that is fixed, keep the file under the project's gitignored test-output/.
        OUT.mkdir(exist_ok=True)
        (OUT / "browser.sqlite3").unlink(missing_ok=True)
        url = "sqlite:///test-output/browser.sqlite3"
    gw = start_gateway(url, sim.url, {"SCRAPE_INTERVAL": "0.1"})
    gw.manage("shell", "-c", FILL)
    yield gw
    gw.stop()
    sim.stop()
    database.drop()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
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


def screenshot(driver: webdriver.Chrome, name: str) -> None:
    OUT.mkdir(exist_ok=True)
    DOCS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(OUT / name))
    # The README's copies change only when asked, so a test run leaves the tree clean.
    if os.environ.get("UPDATE_SCREENSHOTS"):
        shutil.copyfile(OUT / name, DOCS / name)


def login(driver: webdriver.Chrome, gw: GatewayProcess) -> None:
    driver.get(gw.url + "/admin/login/")
    if "/admin/login/" not in driver.current_url:  # this browser's session is logged in already
        return
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys(gw.demo["admin_password"])
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(driver, 10).until(lambda d: "/admin/login/" not in d.current_url)


def completions(gw: GatewayProcess, n: int) -> list[threading.Thread]:
    def one(user: str) -> None:
        body = {
            "model": "demo-llama",
            "stream": True,
            "max_tokens": 200,
            "messages": [{"role": "user", "content": "Tell me a long story."}],
        }
        headers = {"Authorization": f"Bearer {gw.key(user)}"}
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream(
                "POST", gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=20
            ) as r,
        ):
            for _ in r.iter_bytes():
                pass

    threads = [
        threading.Thread(target=one, args=(("alice", "bob")[i % 2],), daemon=True) for i in range(n)
    ]
    for t in threads:
        t.start()
    return threads


def test_it_shows_the_report_and_a_live_dashboard(
    gateway: GatewayProcess, browser: webdriver.Chrome
) -> None:
    login(browser, gateway)

    browser.get(gateway.url + "/admin/reports/")
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) == 3
    assert browser.find_elements(By.CSS_SELECTOR, 'svg[aria-label="Cost per day"] rect.bar')
    assert "demo" in browser.find_element(By.ID, "table-tenants").text
    screenshot(browser, "report.png")

    browser.get(gateway.url + "/admin/dashboard/")
    wait = WebDriverWait(browser, 20, poll_frequency=0.1)
    wait.until(lambda d: d.find_element(By.ID, "dash-conn").text == "live")
    before = int(browser.find_element(By.ID, "dash-count").text)
    threads = completions(gateway, 6)
    wait.until(lambda d: int(d.find_element(By.ID, "dash-count").text) > before)
    wait.until(lambda d: "alice" in d.find_element(By.ID, "dash-queues").text)
    assert (
        "sim" in browser.find_element(By.ID, "dash-backends").text
        or browser.find_element(By.ID, "dash-backends").text.strip()
    )
    screenshot(browser, "dashboard.png")
    for t in threads:
        t.join(timeout=25)


WHY = ("per-user concurrency cap", "gate closed", "behind a higher band", "fair-share turn")


def texts(driver: webdriver.Chrome, selector: str) -> list[str]:
    """Read in one script call: the dashboard redraws every second, so an element found by one
    WebDriver call may be gone by the next."""
    found: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent)", selector
    )
    return found


def test_the_dashboard_charts_a_flood_and_says_why_each_principal_waits(
    gateway: GatewayProcess, browser: webdriver.Chrome
) -> None:
    login(browser, gateway)
    browser.set_window_size(1280, 1500)
    browser.get(gateway.url + "/admin/dashboard/")
    wait = WebDriverWait(browser, 20, poll_frequency=0.1)
    wait.until(lambda d: texts(d, "#dash-conn") == ["live"])
    threads = completions(gateway, 12)
    wait.until(lambda d: "demo/alice" in "".join(texts(d, "#chart-principals-legend")))
    assert texts(browser, "#chart-principals path.series title")
    assert texts(browser, "#chart-bands rect.strip-open, #chart-bands rect.strip-closed")
    wait.until(lambda d: any(w in why for why in texts(d, "#dash-queues td.why") for w in WHY))
    screenshot(browser, "dashboard.png")
    for t in threads:
        t.join(timeout=25)
    wait.until(lambda d: texts(d, "#chart-ttft path.series title"))


def test_the_dashboard_fits_a_1280_pixel_screen(
    gateway: GatewayProcess, browser: webdriver.Chrome
) -> None:
    login(browser, gateway)
    browser.set_window_size(1280, 1500)
    browser.get(gateway.url + "/admin/dashboard/")
    WebDriverWait(browser, 20).until(
        lambda d: (
            "sim" in d.find_element(By.ID, "dash-backends").text
            or "No backends" in d.find_element(By.ID, "dash-backends").text
        )
    )
    overflow = browser.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
