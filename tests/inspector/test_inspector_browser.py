"""The inspector page in a real headless Chromium: it loads, shows what a test client
does as it happens, and shows a hostile title as text.

Needs Debian's ``chromium`` at /usr/bin/chromium and ``playwright`` (the dev group);
playwright never downloads a browser here. Set ``AHP_INSPECTOR_SCREENSHOT`` to a
path to keep the page's picture (docs/images/inspector.png is made that way).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from ahp_scripted import Rule, Say
from tests.inspector.test_inspector import TOKEN, inspected
from tests.sessions.conftest import open_session, start_turn, turn_end

CHROMIUM = Path("/usr/bin/chromium")

playwright_api = pytest.importorskip(
    "playwright.async_api", reason="playwright is not installed (uv sync installs the dev group)"
)
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"no browser at {CHROMIUM} (Debian: apt-get install chromium)",
    ),
]

#: Long enough for the page to see the chat busy before the turn ends.
SLOW = Rule(
    exact="slow", steps=[Say("one two three four five six seven eight", words=1, delay=0.15)]
)
HOSTILE = "<img src=x onerror=\"document.title='owned'\">Title & <b>bold</b>"


async def test_the_page_shows_a_session_and_follows_a_turn(tmp_path):
    expect = playwright_api.expect
    expect.set_options(timeout=15_000)
    async with (
        inspected(tmp_path, rules=(SLOW,)) as (running, port),
        playwright_api.async_playwright() as driver,
    ):
        browser = await driver.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 1000})
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on(
                "console",
                lambda message: (
                    problems.append(f"console: {message.text}") if message.type == "error" else None
                ),
            )
            await page.goto(f"http://127.0.0.1:{port}/inspect?token={TOKEN}")
            await expect(page.locator("#status")).to_contain_text("Connected as ahp-inspector-")
            await expect(page.locator("#plugins")).to_contain_text("scripted")
            await expect(page.locator("#clients")).to_contain_text("(this page)")

            client = await running.connect("test-client")
            await client.initialize()
            session, chat = await open_session(client)

            row = page.locator(f'#sessions tr[data-session="{session}"]')
            await expect(row).to_be_visible()
            await expect(row).to_contain_text("Scripted")
            await expect(page.locator("#clients")).to_contain_text("test-client")
            # The page watches the session's chat as soon as the host has it open.
            chat_box = page.locator(f'#actions section[data-channel="{chat}"]')
            await expect(chat_box).to_be_visible()

            await start_turn(client, chat, "slow", "t1")
            await expect(row.locator(f'li[data-chat="{chat}"]')).to_contain_text("in progress")
            await expect(chat_box.locator('li[data-type="chat/delta"]').first).to_be_visible()
            await turn_end(client, chat)
            await expect(chat_box.locator('li[data-type="chat/turnComplete"]')).to_have_count(1)
            await expect(row.locator(f'li[data-chat="{chat}"]')).to_contain_text("idle")
            await expect(page.locator("#latency-now")).to_contain_text("(last)")
            await expect(page.locator("#rate-now")).not_to_have_text(
                "\u2013"
            )  # the dash shown before any figure
            await expect(page.locator("#replay-entries-text")).not_to_have_text("0 of 1,000")

            # A title is the user's text: shown as it is, never run or parsed.
            await client.dispatch(session, {"type": "session/titleChanged", "title": HOSTILE})
            await expect(row.locator("td").first).to_have_text(HOSTILE)
            assert await page.locator("#sessions img, #sessions b").count() == 0
            assert await page.title() == "AHP inspector"

            second = await running.connect("second-client")
            await second.initialize()
            _, other_chat = await open_session(second, 2)
            await expect(page.locator("#sessions tbody tr")).to_have_count(2)
            await expect(page.locator("#clients")).to_contain_text("second-client")
            other_box = page.locator(f'#actions section[data-channel="{other_chat}"]')
            await expect(other_box).to_be_visible()
            await start_turn(second, other_chat, "hello", "t2")
            await expect(other_box.locator('li[data-type="chat/turnComplete"]')).to_have_count(1)
            await expect(page.locator("#latency-chart")).to_have_attribute(
                "aria-label", re.compile(r"the longest of 2 ")
            )

            picture = tmp_path / "inspector.png"
            await page.screenshot(path=str(picture), full_page=True)
            assert picture.stat().st_size > 10_000
            wanted = os.environ.get("AHP_INSPECTOR_SCREENSHOT")
            if wanted:
                shutil.copyfile(picture, wanted)
            assert problems == []
        finally:
            await browser.close()
