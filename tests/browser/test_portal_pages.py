"""Headless Chromium at 1280 px: a tenant's administrator signs in to the portal, reads the
tenant's usage, makes an API key that then works on the real API, revokes it, adds a member and
watches the tenant's lanes in the live queue;
no page, nor the operators' tenant page with its key table, is wider than the screen."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

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

PEOPLE = """
from django.contrib.auth import get_user_model
from tenants.models import ApiKey, Membership, Role, Tenant
demo = Tenant.objects.get(slug="demo")
User = get_user_model()
ada = User.objects.create_user("ada", "ada@example.com", "ada-password-1")
Membership.objects.create(user=ada, tenant=demo, role=Role.ADMIN)
User.objects.create_user("dee", "dee@example.com", "dee-password-1")
for n in range(12):  # a long key list with long fields: the table must still fit 1280 px
    ApiKey.objects.create_key(tenant=demo, user=f"service-account-with-a-long-name-{n}",
        name=f"nightly evaluation pipeline number {n}",
        allowed_models="demo-llama, demo-mistral, some-very-long-model-name-*, other-family-*")
"""


@pytest.fixture(scope="module")
def portal(gateway: GatewayProcess) -> GatewayProcess:
    gateway.manage("shell", "-c", PEOPLE)
    return gateway


def sign_in(driver: webdriver.Chrome, gw: GatewayProcess) -> None:
    driver.get(gw.url + "/portal/login/")
    driver.find_element(By.NAME, "username").send_keys("ada")
    driver.find_element(By.NAME, "password").send_keys("ada-password-1")
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(driver, 10).until(lambda d: d.current_url.endswith("/portal/demo/"))


def chat(gw: GatewayProcess, secret: str) -> int:
    body = {"model": "demo-llama", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {secret}"}
    return httpx.post(
        gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=30
    ).status_code


def test_an_administrator_reads_usage_makes_a_working_key_and_revokes_it(
    portal: GatewayProcess, browser: webdriver.Chrome
) -> None:
    browser.set_window_size(1280, 1000)
    sign_in(browser, portal)
    assert "alice" in browser.page_source and "demo-llama" in browser.page_source
    assert overflow(browser) <= 0
    screenshot(browser, "portal-usage.png")

    browser.find_element(By.LINK_TEXT, "API keys").click()
    assert overflow(browser) <= 0
    screenshot(browser, "portal-keys.png")
    form = browser.find_element(By.ID, "new-key")
    form.find_element(By.NAME, "name").send_keys("browser-made")
    form.find_element(By.NAME, "user").send_keys("ada")
    form.find_element(By.NAME, "allowed_models").send_keys("demo-*")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    secret = WebDriverWait(browser, 10, ignored_exceptions=LIVE).until(
        lambda d: d.find_element(By.ID, "secret").text
    )
    assert chat(portal, secret) == 200

    browser.find_element(By.LINK_TEXT, "Back to the keys").click()
    row = next(
        tr for tr in browser.find_elements(By.CSS_SELECTOR, "#keys tr") if "browser-made" in tr.text
    )
    row.find_element(By.XPATH, ".//button[text()='Revoke']").click()
    WebDriverWait(browser, 10).until(lambda d: "revoked." in d.page_source)
    WebDriverWait(browser, 10, poll_frequency=0.2).until(lambda _: chat(portal, secret) == 401)


def test_an_administrator_adds_a_member(portal: GatewayProcess, browser: webdriver.Chrome) -> None:
    browser.set_window_size(1280, 1000)
    browser.get(portal.url + "/portal/demo/members/")
    if "/login/" in browser.current_url:
        sign_in(browser, portal)
        browser.get(portal.url + "/portal/demo/members/")
    browser.find_element(By.NAME, "person").send_keys("dee@example.com")
    browser.find_element(By.XPATH, "//button[text()='Add']").click()
    WebDriverWait(browser, 10, ignored_exceptions=LIVE).until(
        lambda d: "dee" in d.find_element(By.ID, "members").text
    )
    assert overflow(browser) <= 0


def test_the_live_queue_shows_the_tenants_lanes_as_they_run(
    portal: GatewayProcess, browser: webdriver.Chrome
) -> None:
    browser.set_window_size(1280, 1000)
    browser.get(portal.url + "/portal/demo/queue/")
    if "/login/" in browser.current_url:
        sign_in(browser, portal)
        browser.get(portal.url + "/portal/demo/queue/")
    wait = WebDriverWait(browser, 20, poll_frequency=0.1, ignored_exceptions=LIVE)
    wait.until(lambda d: d.find_element(By.ID, "queue-conn").text == "live")
    body = {
        "model": "demo-llama",
        "max_tokens": 150,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    }
    headers = {"Authorization": f"Bearer {portal.key('alice')}"}
    with ThreadPoolExecutor(4) as pool:
        runs = [
            pool.submit(
                httpx.post,
                portal.url + "/v1/chat/completions",
                json=body,
                headers=headers,
                timeout=60,
            )
            for _ in range(4)
        ]
        wait.until(lambda d: "alice" in d.find_element(By.ID, "queue-lanes").text)
        assert all(run.result().status_code == 200 for run in runs)


def test_the_operators_tenant_page_with_many_keys_fits_1280_pixels(
    portal: GatewayProcess, browser: webdriver.Chrome
) -> None:
    browser.delete_all_cookies()
    login(browser, portal)
    browser.set_window_size(1280, 1000)
    browser.get(portal.url + "/admin/tenants/tenant/")
    browser.get(
        browser.find_element(By.CSS_SELECTOR, "#result_list tbody th a").get_attribute("href")
    )
    assert "service-account-with-a-long-name-11" in browser.page_source
    screenshot(browser, "admin-tenant.png")
    assert overflow(browser) <= 0
