"""The dashboard in a real browser (Playwright driving Debian's Chromium) against a real
`thresher serve`: sign in with a token, watch a running job's progress advance without a
reload, open a job, read a bad record's line number, cancel from the page, pause a
schedule; another tenant sees none of it; no console error (a Content-Security-Policy
violation is one) on any page. Screenshots of every page land in the test's folder
(`THRESHER_UI_SHOTS` names another, to look at them)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BAD = b'{"id": 1, "x": 1.0}\n{"id": 2, "x": 2.0}\nnot json at all\n{"id": 4, "x": 4.0}\n'


# What a screen reader could not name on a page: a form control with no label, an image
# with no alt text, a button or link with no text, a table with no header cells.
UNLABELLED = """() => {
  const bad = [];
  for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea")) {
    if (!(el.labels && el.labels.length) && !el.getAttribute("aria-label")) bad.push(el.outerHTML);
  }
  for (const el of document.querySelectorAll("img")) {
    if (!el.getAttribute("alt")) bad.push(el.outerHTML);
  }
  for (const el of document.querySelectorAll("button, a")) {
    if (!el.textContent.trim() && !el.getAttribute("aria-label")) bad.push(el.outerHTML);
  }
  for (const el of document.querySelectorAll("table")) {
    if (!el.querySelector("th")) bad.push("a table with no header cells");
  }
  if (!document.querySelector("h1")) bad.push("no h1");
  return bad;
}"""


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("THRESHER_TEST_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        pytest.fail("no Chromium: `bash scripts/chromium.sh` installs Debian's")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield launched
        launched.close()


class Visitor:
    """One tenant's browser session, its console errors and screenshots."""

    def __init__(self, browser: Any, server: Server, shots: Path, who: str) -> None:
        self.context = browser.new_context(viewport={"width": 1100, "height": 800})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.url, self.shots, self.who = server.url, shots, who

    def sign_in(self, token: str) -> None:
        self.page.goto(f"{self.url}/ui/login")
        self.page.fill("#token", token)
        self.page.click("button[type=submit]")
        self.page.wait_for_url("**/ui/jobs")

    def shot(self, name: str) -> None:
        """A screenshot of the page, after checking what a screen reader needs of it."""
        assert self.page.evaluate(UNLABELLED) == [], name
        self.page.screenshot(path=str(self.shots / f"{self.who}-{name}.png"), full_page=True)


def slow_parts(site: ServiceSite, files: int) -> Path:
    folder = site.shared / "parts"
    folder.mkdir()
    for n in range(files):
        (folder / f"part-{n:02d}.jsonl").write_text(f'{{"id": {n}, "x": {n}.0}}\n')
    return folder


def acme_jobs(site: ServiceSite, server: Server, token: str) -> tuple[str, str]:
    """A finished job with a bad line (line 3), a slow running one, and a schedule."""
    with server.client(token) as client:
        file_id = client.post("/v1/files", files={"file": ("in.jsonl", BAD)}).json()["id"]
        bad = client.post(
            "/v1/jobs", json={"input_file_id": file_id, "model": "double", "id_column": "id"}
        ).json()["id"]
        wait_for_job(client, bad)
        body = {"source": {"uri": str(slow_parts(site, 12)), "format": "jsonl"},
                "model": "slow", "id_column": "id", "name": "nightly-slow"}  # fmt: skip
        slow = client.post("/v1/jobs", json=body).json()["id"]
        schedule = {"name": "nightly", "cron": "0 2 * * *", "job": {
            "source": {"uri": str(site.shared / "parts"), "format": "jsonl"},
            "model": "double"}}  # fmt: skip
        assert client.post("/v1/schedules", json=schedule).status_code == 201
    return bad, slow


def resume(a: Visitor, server: Server, token: str, job_id: str) -> None:
    """Resume the cancelled job from its page: its committed shards kept, the rest run
    again, each row once in its results."""
    a.page.wait_for_function(  # shown once its coordinator has stopped: reload till then
        "() => { if (!document.querySelector('#resume')) { location.reload(); return false; }"
        " return true; }",
        timeout=20_000,
        polling=500,
    )
    a.page.click("#resume")
    with server.client(token) as client:
        assert wait_for_job(client, job_id)["status"] == "succeeded"
        lines = client.get(f"/v1/jobs/{job_id}/results").text.splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == list(range(12))


def charts(a: Visitor, server: Server, token: str) -> None:
    """A second run of the bad job's name: its page charts its rows over time and its
    drift against the first run, each an image that loads under the page's policy."""
    with server.client(token) as client:
        file_id = client.post("/v1/files", files={"file": ("in.jsonl", BAD)}).json()["id"]
        body = {"input_file_id": file_id, "model": "double", "id_column": "id"}
        again = client.post("/v1/jobs", json=body).json()["id"]
        wait_for_job(client, again)
    a.page.goto(f"{server.url}/ui/jobs/{again}")
    for alt in ("Rows done over time", "Drift against"):
        image = a.page.locator(f'img[alt^="{alt}"]')
        image.wait_for()
        assert image.evaluate("i => i.decode().then(() => i.naturalWidth > 0)"), alt
    a.shot("job-charts")


def schedules_and_the_rest(a: Visitor, url: str) -> None:
    """Pause a schedule and run it now; then the queue, triggers and batches pages."""
    a.page.goto(f"{url}/ui/schedules")
    a.page.click("text=Pause")
    assert a.page.locator("text=Resume").count() == 1
    a.page.click("text=Run now")  # a manual tick, even while paused
    a.page.wait_for_url("**/ui/schedules")
    a.page.wait_for_function(  # its job starts within moments: reload until shown
        "() => { if (!document.querySelector('.ticks a')) { location.reload(); return false; }"
        " return true; }",
        timeout=20_000,
        polling=1000,
    )
    a.shot("schedules")
    for path in ("queue", "triggers", "batches", "files", "webhooks"):
        a.page.goto(f"{url}/ui/{path}")
        assert a.page.locator("h1").count() == 1
        a.shot(path)
    a.page.keyboard.press("Tab")  # the first stop is the brand link, then the nav
    assert a.page.evaluate("document.activeElement.textContent") == "thresher"


def test_the_dashboard_in_a_browser(tmp_path: Path, browser: Any) -> None:
    shots = Path(os.environ.get("THRESHER_UI_SHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    site = ServiceSite(tmp_path, slow_delay=0.6)
    acme, globex = site.token("acme"), site.token("globex")
    server = Server(site)
    try:
        bad, slow = acme_jobs(site, server, acme)
        a = Visitor(browser, server, shots, "acme")
        a.sign_in(acme)
        progress = a.page.locator(f'tr[data-id="{slow}"] [data-field="progress"]')
        first = progress.inner_text()
        a.shot("jobs")
        a.page.wait_for_function(  # the live refresh moves it on, with no reload
            "([id, before]) => document.querySelector(`tr[data-id='${id}'] [data-field=progress]`)"
            ".innerText !== before",
            arg=[slow, first],
            timeout=20_000,
        )
        a.page.click(f"a[href='/ui/jobs/{bad}']")
        assert a.page.locator("table.bad td.line").first.inner_text() == "3"
        a.shot("job-bad-records")
        with a.page.expect_download() as got:
            a.page.click("text=results")
        assert got.value.path().read_bytes().count(b"\n") == 3  # the three good rows
        a.page.goto(f"{server.url}/ui/jobs/{slow}")
        a.page.click("button.danger")  # cancel
        a.page.wait_for_url(f"**/ui/jobs/{slow}")
        with server.client(acme) as client:
            assert wait_for_job(client, slow)["status"] == "cancelled"
        a.page.reload()
        assert a.page.locator("#job-state").inner_text() == "cancelled"
        a.shot("job-cancelled")
        resume(a, server, acme, slow)
        charts(a, server, acme)
        schedules_and_the_rest(a, server.url)

        b = Visitor(browser, server, shots, "globex")
        b.sign_in(globex)
        assert slow not in b.page.content() and bad not in b.page.content()
        b.shot("jobs")
        assert a.errors == [] and b.errors == []  # before the one page meant to be a 404
        answer = b.page.goto(f"{server.url}/ui/jobs/{slow}")
        assert answer is not None and answer.status == 404
        b.shot("not-theirs")
        headers = answer.headers
        assert "script-src 'self'" in headers["content-security-policy"]
    finally:
        server.stop()
    cookies = a.context.cookies()
    (session,) = [c for c in cookies if c["name"] == "thresher_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert acme not in session["value"]  # the token never travels in the cookie
