"""Headless Chromium: log into the admin, read the usage report, watch the dashboard go live.

Real processes only: the simulator and daphne on loopback with a database this test filled, and
the live update comes from the gateway runtime itself, publishing scheduler snapshots while real
completions run through it. Screenshots go to test-output/ (and to docs/img/ for the README
with UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import contextlib
import threading

import httpx
import pytest

from llmserver.testing.processes import GatewayProcess
from tests.browser.pages import login, overflow, require_chromium, screenshot

require_chromium()

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

# A live page replaces its elements as it updates: one found may be gone by the next read.
LIVE = (StaleElementReferenceException,)

pytestmark = pytest.mark.e2e


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
    wait = WebDriverWait(browser, 20, poll_frequency=0.1, ignored_exceptions=LIVE)
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
    wait = WebDriverWait(browser, 20, poll_frequency=0.1, ignored_exceptions=LIVE)
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
    WebDriverWait(browser, 20, ignored_exceptions=LIVE).until(
        lambda d: (
            "sim" in d.find_element(By.ID, "dash-backends").text
            or "No backends" in d.find_element(By.ID, "dash-backends").text
        )
    )
    assert overflow(browser) <= 0
