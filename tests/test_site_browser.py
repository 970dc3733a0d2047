"""The built site in Chromium, opened from file:// as a reader who downloaded it would: the landing
page and a lesson page load with no console error and every picture drawn, and search answers
with no server (mkdocs-material's offline plugin)."""

from __future__ import annotations

import pytest

from tests.support.browser import browser, chromium, page, poll, save_screenshot  # noqa: F401  (fixtures)
from tests.support.site import built_site

pytestmark = pytest.mark.browser


def _open(pg, url: str) -> list[str]:
    """Load ``url``; the console errors and uncaught exceptions the page raised meanwhile."""
    errors: list[str] = []
    pg.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None)
    pg.on("pageerror", lambda exc: errors.append(f"exception: {exc}"))
    pg.on("requestfailed", lambda req: errors.append(f"failed: {req.url}"))
    pg.goto(url)
    pg.wait_for_load_state("load")
    return errors


def _unloaded_images(pg) -> list[str]:
    return pg.evaluate(
        """() => Array.from(document.images)
            .filter(img => !(img.complete && img.naturalWidth > 0))
            .map(img => img.getAttribute('src'))"""
    )


def test_the_landing_page_and_a_lesson_from_file(page) -> None:  # noqa: F811
    site = built_site()
    errors = _open(page, (site / "index.html").as_uri())
    assert page.locator("h1").first.inner_text().strip().rstrip("¶") == "echoq"
    assert page.get_by_text("make lab", exact=False).count() > 0
    assert not _unloaded_images(page)
    save_screenshot(page.screenshot(), "site-landing.png")

    # Search from the file itself: the offline plugin ships the index as a script.
    page.keyboard.press("/")  # material's shortcut to the search box
    page.keyboard.type("fencing token")
    poll(lambda: page.locator(".md-search-result__item").count() > 0, timeout_s=30, what="search results offline")
    page.keyboard.press("Escape")
    assert not errors, errors

    lesson = site / "notebooks" / "02_recoverable_claim.html"
    errors = _open(page, lesson.as_uri())
    images = page.locator(".jp-OutputArea-output img")
    assert images.count() >= 1, "the lesson page shows no lab picture"
    poll(
        lambda: not _unloaded_images(page),
        timeout_s=30,
        what="every picture loaded",
        describe=lambda: _unloaded_images(page),
    )
    assert page.locator("details.success").count() >= 2, "the lesson's predictions, answers folded"
    assert not page.locator("details.success").first.evaluate("d => d.open"), "an answer is open before it is asked for"
    assert page.get_by_text("Run it", exact=True).count() == 1
    page.set_viewport_size({"width": 1280, "height": 1500})  # the title, the Run it box and a prediction
    save_screenshot(page.screenshot(), "site-lesson.png")
    assert not errors, errors
