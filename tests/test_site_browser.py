"""The built site in Chromium, opened from file:// as a reader who downloaded it would: the landing
page and a lesson page load with no console error and every picture drawn, search answers
with no server (mkdocs-material's offline plugin), and the lesson's rejected answer is its
lines and its picture (the other lesson pages that show one are pictured for the docs, with
ECHOQ_UPDATE_DOCS=1)."""

from __future__ import annotations

import os

import pytest

from tests.support.browser import browser, chromium, feedback_shown, page, poll, save_screenshot  # noqa: F401  (fixtures)
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
    page.set_viewport_size(WIDE)
    save_screenshot(rejected_on(page, lesson.name).screenshot(), "feedback-claim-site.png")
    assert not errors, errors



WIDE = {"width": 1700, "height": 1300}  # the site's widest text column: a rejected answer's picture at full size


def rejected_on(pg, what: str):
    """The output on the page that is a rejected answer's feedback, checked (feedback_shown)."""
    shown = pg.locator(".jp-OutputArea-output").filter(has=pg.locator('img[alt*="✗ ["]')).first
    feedback_shown(shown, what)
    return shown


def test_a_rejected_answers_picture_fills_the_column_and_opens_at_full_size(page) -> None:  # noqa: F811
    """At an ordinary laptop's width the picture takes the content column's whole width (the
    output prompt gives up its room: docs/assets/pictures.css), and a click shows it at the
    size it was drawn."""
    site = built_site()
    page.set_viewport_size({"width": 1280, "height": 1000})
    errors = _open(page, (site / "notebooks" / "02_recoverable_claim.html").as_uri())
    shown = rejected_on(page, "lesson 02")
    img = shown.locator("img").first
    sizes = img.evaluate(
        """i => ({shown: i.getBoundingClientRect().width, drawn: i.naturalWidth,
                  column: document.querySelector('.md-content__inner').getBoundingClientRect().width})"""
    )
    assert sizes["shown"] >= 0.9 * sizes["column"], sizes  # before: 572 of 688 px (the prompt's 120 px lost)
    src = img.get_attribute("src")
    img.click()
    page.wait_for_url(f"**/{src}")
    assert page.evaluate("() => document.images[0].naturalWidth") == sizes["drawn"]
    assert not errors, errors


# The other lesson pages with a rejected answer's feedback (tools/lesson_notebooks.py's REJECTED);
# lesson 02's is seen above. tests/test_site.py reads all three from the built files.
REJECTED_PAGES = {"complete": "03_at_least_once.html", "stall": "04_stalled_recovery.html"}


@pytest.mark.skipif(os.environ.get("ECHOQ_UPDATE_DOCS") != "1", reason="pictures for docs/course.md only")
def test_the_rejected_answers_on_the_lesson_pages_for_the_docs(page) -> None:  # noqa: F811
    site = built_site()
    page.set_viewport_size(WIDE)
    for key, name in REJECTED_PAGES.items():
        errors = _open(page, (site / "notebooks" / name).as_uri())
        save_screenshot(rejected_on(page, name).screenshot(), f"feedback-{key}-site.png")
        assert not errors, errors
