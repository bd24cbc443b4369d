"""What the browser tests share: where Chromium is, screenshots, signing in, page overflow."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from llmserver.testing.processes import ROOT, GatewayProcess

if TYPE_CHECKING:
    from selenium import webdriver

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
OUT = ROOT / "test-output"
DOCS = ROOT / "docs" / "img"


def require_chromium() -> None:
    """Skip the calling module where Selenium, Chromium or its driver is missing."""
    pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
        pytest.skip(
            "chromium/chromedriver missing: apt-get install -y chromium chromium-driver",
            allow_module_level=True,
        )


def screenshot(driver: webdriver.Chrome, name: str) -> None:
    OUT.mkdir(exist_ok=True)
    DOCS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(OUT / name))
    # The README's copies change only when asked, so a test run leaves the tree clean.
    if os.environ.get("UPDATE_SCREENSHOTS"):
        shutil.copyfile(OUT / name, DOCS / name)


def login(driver: webdriver.Chrome, gw: GatewayProcess) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(gw.url + "/admin/login/")
    if "/admin/login/" not in driver.current_url:  # this browser's session is logged in already
        return
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys(gw.demo["admin_password"])
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(driver, 10).until(lambda d: "/admin/login/" not in d.current_url)


def overflow(driver: webdriver.Chrome) -> int:
    """How many pixels the page is wider than the window (0 or less: it fits)."""
    width: int = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    return width
