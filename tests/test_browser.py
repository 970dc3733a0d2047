"""The lab panels in a real browser: Chromium (Playwright) against JupyterLab and Voila.

One page per environment: ``notebooks/present.ipynb`` (the four panels) run in JupyterLab,
and the same notebook served by ``make present`` (Voila). In each, for every panel:

* click a move and sample the live canvas at every animation frame of the page: every frame
  the kernel sends reaches the page, and it paints at least 5 distinct pictures while the
  tokens travel;
* scrub the timeline back (from the keyboard: Home on its handle) and check that the
  readout shows that moment's words, read-only; then return to live;
* tab to a control and press it with Enter: the readout must follow.

Everything talks to one real Valkey, which the test also reads.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.support.browser import (  # noqa: F401  (fixtures)
    browser,
    chromium,
    feedback_shown,
    kernel_env,
    lab_root,
    lab_server,
    open_in_lab,
    page,
    poll,
    save_screenshot,
    start_present,
    valkey_for_kernels,
)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# panel: (a control's text that finds its output, the move to animate, (focus here, Tab to here))
PANELS = {
    "claim": ("crash mid-job", "enqueue", ("enqueue", "claim")),
    "delivery": ("fence: next step", "fence: next step", ("deliver", "fence: next step")),
    "reap": ("step the reap", "start workers", ("start workers", "claim again")),
    "fleet": ("add 20 jobs", "add 20 jobs", ("add 20 jobs", "stop all")),
}

# Distinct pictures a move must paint: more than a jump from the first picture to the last.
ANIMATED = 5
SAMPLER = """canvas => {
    // Every picture painted on the panel's canvas, hashed (FNV-1a) each time ipympl paints a
    // frame onto it. Counting paints, not animation ticks, so a busy machine that samples
    // less often does not see fewer pictures than were shown; and hashing a 160x100 copy of
    // the pixels, not a PNG of the canvas, so the counting does not slow the page down enough
    // to make it drop the frames it counts.
    window.__frames = [];
    window.__sampling = true;
    const proto = CanvasRenderingContext2D.prototype;
    if (!proto.__echoqDrawImage) proto.__echoqDrawImage = proto.drawImage;
    const small = document.createElement("canvas");
    small.width = 160; small.height = 100;
    const smallContext = small.getContext("2d", { willReadFrequently: true });
    const hash = source => {
        proto.__echoqDrawImage.call(smallContext, source, 0, 0, small.width, small.height);
        const pixels = smallContext.getImageData(0, 0, small.width, small.height).data;
        let h = 0x811c9dc5;
        for (let i = 0; i < pixels.length; i++) { h ^= pixels[i]; h = Math.imul(h, 16777619); }
        return h >>> 0;
    };
    window.__frames.push(hash(canvas));
    if (!proto.__echoqCounting) {
        proto.__echoqCounting = true;
        proto.drawImage = function (...args) {
            const result = proto.__echoqDrawImage.apply(this, args);
            if (window.__sampling && this.canvas === window.__sampled) window.__frames.push(hash(this.canvas));
            return result;
        };
    }
    window.__sampled = canvas;
    window.__received = 0;
    if (!URL.__echoqCreate) {
        URL.__echoqCreate = URL.createObjectURL;
        URL.createObjectURL = function (blob) {
            if (window.__sampling) window.__received += 1;
            return URL.__echoqCreate.call(URL, blob);
        };
    }
}"""


def quiet(pg, canvas, still_s: float = 0.6) -> None:
    """Wait until the canvas has not changed for ``still_s`` (the page's start-up draws are over)."""
    last, since = None, time.monotonic()
    deadline = since + 60
    while time.monotonic() < deadline:
        now = canvas.evaluate("c => { const png = c.toDataURL(); return png.length + ':' + png.slice(-96); }")
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= still_s:
            return
        time.sleep(0.1)
    pytest.fail("the canvas kept changing for a minute")


def words(readout) -> str:
    """The readout's words, without its status pill ("live · #3 · 10:04:05.1")."""
    return readout.inner_text().split("readout · ", 1)[-1].strip()


def button(panel, text: str):
    # Move buttons only: a toggle button may carry the same text (the Claim lab's Lua picker).
    return panel.locator(f'button.widget-button:text-is("{text}")').first


def exercise_panel(pg, scope, name: str) -> None:
    marker, move, (tab_from, tab_to) = PANELS[name]
    panel = scope.locator(".jp-OutputArea-output").filter(has=pg.get_by_text(marker, exact=True)).first
    panel.wait_for(timeout=120_000)
    panel.scroll_into_view_if_needed()
    readout = panel.locator("[role=status]").first
    readout.wait_for(timeout=60_000)
    assert readout.get_attribute("aria-live") == "polite"
    canvas = panel.locator(".jupyter-matplotlib-figure canvas").first
    canvas.wait_for(timeout=60_000)
    poll(lambda: (box := canvas.bounding_box()) and box["width"] > 400, what=f"the {name} canvas to get its size")
    poll(lambda: "live" in readout.inner_text() and "animating" not in readout.inner_text(), what="a settled panel")
    quiet(pg, canvas)
    before = words(readout)

    # 1. a move animates: every frame the kernel sends (18 a move) reaches the page, and the
    # page paints at least ANIMATED distinct pictures while the tokens travel. It paints an
    # image only once it has loaded, and one replaced before that is never painted, so a page
    # short of CPU (JupyterLab re-rendering the readout and the timeline as the move begins,
    # the rest of the suite on the same two cores) paints fewer: 6 of 18 was seen. The move
    # is made a second time if the first one's paints fall short; both must have reached
    # the page in full.
    seen = []
    for _try in range(2):
        canvas.evaluate(SAMPLER)
        button(panel, move).click()
        poll(lambda was=before: words(readout) != was, what=f"the readout after {move!r}")
        poll(lambda: "animating" not in readout.inner_text(), timeout_s=60, what=f"the {move!r} animation to end")
        time.sleep(0.3)  # a few settled frames after the last one
        frames, received = pg.evaluate(
            "() => { window.__sampling = false; return [window.__frames, window.__received]; }"
        )
        distinct = len(set(frames[1:]) - {frames[0]})
        seen.append(f"{distinct} distinct pictures in {len(frames) - 1} paints of {received} images received")
        assert received >= 18, f"{name}: the kernel's frames did not all reach the page during {move!r}: {seen}"
        if distinct >= ANIMATED:
            break
        before = words(readout)
    assert distinct >= ANIMATED, f"{name}: during {move!r}: {seen}"
    after = words(readout)

    # 2. scrub back to the panel's first moment, from the keyboard; the readout follows, read-only
    handle = panel.locator(".widget-slider", has_text="time").locator(".noUi-handle").first
    poll(
        lambda: (
            float(handle.get_attribute("aria-valuemax") or 0) >= 1
            and handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
        ),
        what=f"the {name} timeline to reach the latest frame",
        describe=lambda: f"now {handle.get_attribute('aria-valuenow')}, max {handle.get_attribute('aria-valuemax')}",
    )
    handle.focus()
    pg.keyboard.press("Home")
    poll(lambda: "read-only" in readout.inner_text(), what=f"the {name} timeline to scrub back")
    scrubbed = words(readout)
    assert scrubbed.startswith("Connected to Valkey"), scrubbed
    poll(lambda: button(panel, tab_from).is_disabled(), what="the moves to be off: the past is read-only")
    button(panel, "live").click()
    poll(lambda: words(readout) == after and "read-only" not in readout.inner_text(), what="live again")

    # 3. tab to a control and press it from the keyboard
    poll(lambda: button(panel, tab_from).is_enabled(), what=f"{tab_from!r} to be enabled")
    button(panel, tab_from).focus()
    pg.keyboard.press("Tab")
    focused = pg.evaluate("() => document.activeElement && document.activeElement.innerText.trim()")
    assert focused == tab_to, f"Tab from {tab_from!r} reached {focused!r}, not {tab_to!r}"
    current = readout.inner_text()
    pg.keyboard.press("Enter")
    poll(lambda: readout.inner_text() != current, what=f"the readout after Enter on {tab_to!r}")


def answers_a_click(pg, scope, name: str) -> None:
    """A panel is drawn, and its move answers a click: the readout says what the move did."""
    marker, move, _tabs = PANELS[name]
    panel = scope.locator(".jp-OutputArea-output").filter(has=pg.get_by_text(marker, exact=True)).first
    panel.wait_for(timeout=120_000)
    panel.scroll_into_view_if_needed()
    readout = panel.locator("[role=status]").first
    canvas = panel.locator(".jupyter-matplotlib-figure canvas").first
    canvas.wait_for(timeout=60_000)
    poll(lambda: (box := canvas.bounding_box()) and box["width"] > 400, what=f"the {name} canvas to get its size")
    poll(lambda: "live" in readout.inner_text() and "animating" not in readout.inner_text(), what="a settled panel")
    before = words(readout)
    button(panel, move).click()
    poll(lambda: words(readout) != before, what=f"the {name} readout after {move!r}")


def test_the_four_panels_in_jupyterlab(page, lab_server) -> None:  # noqa: F811
    """present.ipynb in JupyterLab: run all, then drive each panel with mouse and keyboard."""
    scope = open_in_lab(page, lab_server, "notebooks/present.ipynb")
    scope.locator(".jupyter-matplotlib-figure canvas").nth(3).wait_for(timeout=120_000)
    for name in PANELS:
        exercise_panel(page, scope, name)
    claim = scope.locator(".jp-OutputArea-output").filter(has=page.get_by_text("crash mid-job", exact=True)).first
    claim.scroll_into_view_if_needed()
    save_screenshot(claim.screenshot(), "lab-present-jupyterlab.png")


def test_the_four_panels_in_voila(page, valkey_for_kernels) -> None:  # noqa: F811
    """`make present` in Voila: the panels without code, each live; one driven as in JupyterLab."""
    if not (NOTEBOOKS / "present.ipynb").is_file():
        pytest.skip("notebooks/present.ipynb not present")
    voila, command = start_present(kernel_env(valkey_for_kernels))
    try:
        assert "--Voila.ip=127.0.0.1" in command and "--no-browser" in command
        # Voila runs the notebook before the page fires "load"; the wait below allows for that.
        page.goto(voila.url + "/", wait_until="commit")
        page.locator(".jupyter-matplotlib-figure canvas").nth(3).wait_for(timeout=120_000)
        # The panels are the same widgets as in JupyterLab, where each is driven in full: here
        # the Fleet (the busiest) is driven in full, and each other panel answers a click.
        for name in PANELS:
            if name == "fleet":
                exercise_panel(page, page, name)
            else:
                answers_a_click(page, page, name)
        # A change made outside the page (this test, with the library) is drawn: the kernel's
        # re-read clock runs in Voila's kernel as in JupyterLab's.
        from echoq import Queue, connect

        claim = page.locator(".jp-OutputArea-output").filter(has=page.get_by_text("crash mid-job", exact=True)).first
        readout = claim.locator("[role=status]").first
        name, pending = re.search(r"emq:\{([^}]+)\}:pending holds (\d+)", readout.inner_text()).groups()  # type: ignore[union-attr]
        Queue(name, connect(valkey_for_kernels.url)).enqueue_many(["made outside the page"] * 3)
        poll(lambda: f"pending holds {int(pending) + 3}" in readout.inner_text(), what="jobs enqueued outside, drawn")
        # Voila shows the panels, never the code that builds them.
        assert page.get_by_text("from echoq.teaching.lab import").count() == 0
        assert page.get_by_text("ClaimLab()").count() == 0
        assert page.locator(".jp-CodeMirrorEditor").count() == 0
        page.locator(".jp-OutputArea-output").first.scroll_into_view_if_needed()
        save_screenshot(page.screenshot(full_page=True), "voila-present.png")
    finally:
        voila.stop()


# A rejected answer of each kind of picture: a scene's (claim, stall) and a move's beside the
# reference's (complete), as lessons 02-04 show them after each exercise's solution.
REJECTED = {
    "claim": ("row-not-active", "Lesson 02 · write the claim"),
    "stall": ("dead-in-two-places", "Lesson 04 · the stall count"),
    "complete": ("fence-on-attempts", "Lesson 03 · the fenced complete"),
}


def test_a_rejected_answer_is_pictured_in_jupyterlab(page, lab_server, lab_root) -> None:  # noqa: F811
    """Three rejected answers' feedback in JupyterLab: each is its lines and its picture (loaded,
    the ✗ line as its alt text); the move beside the reference steps back through its commands."""
    source = ["from echoq.teaching import exercises"]
    source += [f'exercises.example("{key}", "{name}")' for key, (name, _title) in REJECTED.items()]
    notebook = lab_root / "notebooks" / "rejected_answers.ipynb"
    notebook.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": src}
                    for src in source
                ],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        )
    )
    page.set_viewport_size({"width": 1280, "height": 1200})
    try:
        scope = open_in_lab(page, lab_server, "notebooks/rejected_answers.ipynb")
        for key, (_name, title) in REJECTED.items():
            shown = scope.locator(".jp-OutputArea-output").filter(has_text=title).first
            img, line = feedback_shown(shown, f"the {key} answer", timeout_ms=120_000)
            assert line.startswith("["), f"{key}: the alt text's ✗ line names no mistake: {line}"
            if key == "complete":  # a move: step its board back through its commands, and forward again
                end = img.get_attribute("src")
                button(shown, "back").click()
                poll(lambda i=img, e=end: i.get_attribute("src") != e, what="the board one command back")
                back = img.get_attribute("src")
                button(shown, "forward").click()
                poll(lambda i=img, b=back: i.get_attribute("src") != b, what="the board at the end again")
            save_screenshot(shown.screenshot(), f"feedback-{key}-jupyterlab.png")
    finally:
        notebook.unlink()


FOLLOWED = "lab-followed"  # the queue of the lab the next test shows (this session's Valkey only)
SHOWN_CLOCK = re.compile(r"#\d+ · (\d\d):(\d\d):(\d\d\.\d)")  # the pill: "live · #7 · 21:12:46.7"


def _readout_counts(readout, pending: int, active: int) -> bool:
    # The readout tells a move's counts from its half-way frame on, as the picture's words do.
    text = readout.inner_text()
    return f"pending holds {pending}" in text and f"active holds {active}" in text


def _drawn(readouts, counts: tuple[int, int], written: float) -> tuple[float, float]:
    """Wait until every page's lab readout tells ``counts`` (pending, active) after a write
    that returned at ``written`` (time.time()). How long after the write the kernel recorded
    the frame they show (its clock, in the pill: the kernel's re-read clock at work, which
    load on the machine hardly delays), and the seconds until the last page showed it (CPU
    spent by Chromium and the kernel's drawing, which load does delay)."""
    shown: dict[int, str] = {}
    deadline = time.monotonic() + 60
    while len(shown) < len(readouts) and time.monotonic() < deadline:
        for n, readout in enumerate(readouts):
            if n not in shown and _readout_counts(readout, *counts):
                shown[n] = readout.inner_text()
        time.sleep(0.02)
    waited = time.time() - written
    assert len(shown) == len(readouts), (
        f"not drawn in 60 s on page(s) {set(range(len(readouts))) - set(shown)}: {counts}"
    )
    recorded = []
    for text in shown.values():
        h, m, s = SHOWN_CLOCK.search(text).groups()  # type: ignore[union-attr]
        of_day = int(h) * 3600 + int(m) * 60 + float(s)
        now = time.localtime(written)
        written_of_day = now.tm_hour * 3600 + now.tm_min * 60 + now.tm_sec + written % 1
        recorded.append((of_day - written_of_day + 43_200) % 86_400 - 43_200)  # across midnight too
    return max(recorded), waited


def test_a_lab_follows_the_server_in_every_tab(page, browser, lab_server, lab_root, valkey_for_kernels) -> None:  # noqa: F811
    """A shown lab draws what another client does to its queue (the kernel's re-read clock)
    within 1.5 s; a second tab of the notebook, saved before its lab cell was run again,
    shows the lab (not "model not found"), live, and both tabs follow the server."""
    from echoq import Queue, connect
    from tests.support.browser import lab_url, new_context

    notebook = lab_root / "notebooks" / "followed_lab.ipynb"
    source = f'%matplotlib widget\nfrom echoq.teaching.lab import ClaimLab\nlab = ClaimLab("{FOLLOWED}")\nlab'
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.write_text(
        json.dumps({"cells": [cell], "metadata": {"kernelspec": kernelspec}, "nbformat": 4, "nbformat_minor": 5})
    )
    queue = Queue(FOLLOWED, connect(valkey_for_kernels.url))
    second = None
    try:
        scope = open_in_lab(page, lab_server, "notebooks/followed_lab.ipynb")
        lab = scope.locator(".jp-OutputArea-output").filter(has=page.get_by_text("crash mid-job", exact=True))
        first = lab.locator("[role=status]").first
        first.wait_for(timeout=120_000)
        poll(
            lambda: _readout_counts(first, 0, 0) and "live" in first.inner_text(), what="the lab, live, its queue empty"
        )
        # Saved (as Lab does every two minutes), then the lab's cell run again: the saved
        # notebook names the panel shown before.
        queue.enqueue("made before the cell ran again")
        _drawn([first], (1, 0), time.time())
        page.evaluate("() => { window.jupyterapp.commands.execute('docmanager:save'); }")
        poll(
            lambda: not page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty"),
            30,
            what="save",
        )
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-cell'); }")
        poll(
            lambda: "emptied for a clean start" in first.inner_text() and _readout_counts(first, 0, 0),
            what="the lab shown again",
        )

        # Another client (this test) moves jobs with the library: 30 enqueued, 12 claimed.
        queue.enqueue_many([f"job {n}" for n in range(30)])
        queue.claim_many(12, lease_ms=600_000)
        recorded, waited = _drawn([first], (18, 12), time.time())
        assert recorded <= 1.5, f"the lab re-read its queue {recorded:.1f} s after a change made outside it"

        # A second tab of the notebook, as saved: the lab, live.
        second = new_context(browser)
        other = second.new_page()
        other.goto(lab_url(lab_server, "notebooks/followed_lab.ipynb"))
        output = other.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output").first
        output.wait_for(timeout=60_000)
        poll(
            lambda: "crash mid-job" in output.inner_text() or "Error displaying widget" in output.inner_text(),
            what="the lab in the second tab",
        )
        assert "Error displaying widget" not in output.inner_text(), output.inner_text()[:300]
        again = output.locator("[role=status]").first
        poll(lambda: _readout_counts(again, 18, 12), what="the second tab's lab, as the server holds it")
        save_screenshot(other.screenshot(), "lab-second-tab.png")

        # Both tabs follow the server (one write: no state between two to be drawn first).
        queue.enqueue_many([f"job {n}" for n in range(30, 40)])
        recorded, both = _drawn([first, again], (28, 12), time.time())
        assert recorded <= 1.5, f"the lab re-read its queue {recorded:.1f} s after a change made outside it"
        print(f"drawn in the page {waited:.2f} s after the move; in both tabs {both:.2f} s")
    finally:
        if second is not None:
            second.close()
        notebook.unlink()
        queue.reset()
