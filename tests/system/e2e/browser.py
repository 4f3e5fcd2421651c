"""A real browser for the UI tests: Debian's chromium driven by Playwright, signed in through Airflow's own
login form. Screenshots go to ``.onceflow/test-output/ui/``."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import quote

import pytest

from tests.support import ROOT

SCREENSHOTS = ROOT / ".onceflow" / "test-output" / "ui"


def chromium() -> str:
    """The browser's binary; the test skips, naming the package, where there is none."""
    found = shutil.which("chromium")
    if found is None:
        pytest.skip(reason="the browser test needs Debian's chromium binary: apt-get install chromium (tools/bootstrap.sh does as root)")
    return found


@contextmanager
def browser_page(height: int = 1100) -> Iterator:
    """A page of a fresh browser, 1500 px wide, waiting up to a minute for what it is asked."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_context(viewport={"width": 1500, "height": height}).new_page()
        page.set_default_timeout(60_000)
        try:
            yield page
        finally:
            browser.close()


def sign_in(page, api: str, user: str, password: str, then: str) -> None:
    """Airflow's own login form, then ``then`` (a path under ``api``)."""
    page.goto(f"{api}/auth/login?next={quote(api + then, safe='')}")
    page.locator('input[name="username"]').fill(user)
    page.locator('input[name="password"]').fill(password)
    page.get_by_role("button", name="Sign in").click()
