"""The instructor's dashboard in a real browser (Chromium, Voila) while learners write hostile
text into every field they can: no script of theirs runs, and the page stays readable."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import echoq
from echoq.teaching import progress
from echoq.teaching.workshop import Workshop, admin, classroom
from tests.support.browser import browser, chromium, page, start_voila  # noqa: F401  (fixtures)
from tests.support.helpers import throwaway_env

ROOT = Path(__file__).resolve().parent.parent
PWN = "window.__pwned=(window.__pwned||0)+1"
HOSTILE = [
    f"<img src=x onerror={PWN}>",
    f"</script><script>{PWN}</script>",
    f"\"'><svg onload={PWN}>",
    f"<iframe srcdoc='<script>parent.{PWN}</script>'>",
    "W" * 3000,
]


@pytest.fixture(scope="module")
def klass(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workshop]:
    folder = tmp_path_factory.mktemp("browser-class") / "class"
    workshop, _ = admin.up(folder, roster=["ada", "bob"], class_name="shown")
    yield workshop
    admin.down(folder)


def write_hostile_everywhere(workshop: Workshop) -> None:
    """Every field a learner can write that a view shows: progress (lessons, exercises,
    misconceptions, numbers), queue names, the class chaos score and worker states, the
    keys the ACL log quotes; and bytes that are not UTF-8."""
    ada = echoq.connect(workshop.learner_url("ada"), decode_responses=False)
    keys = classroom.ClassKeys("shown")
    fields: dict[str, object] = {"lesson:\xff": b"\xfe\xff"}
    for n, text in enumerate(HOSTILE):
        fields[f"lesson:{text}"] = "1700000000000"
        fields[f"check:{text}:{text}:submissions"] = "1"
        fields[f"check:{text}:{text}:at"] = "1"
        fields[f"check:{text}:{text}:misconception"] = text.encode() + b"\xff"
        fields[f"check:0{n}:x:submissions"] = text  # not a number: skipped, counted
        ada.hset(f"emq:{{ada.{text}}}:stats", "enqueued", "1")  # a queue named so
        ada.zadd(f"emq:{{ada.{text}}}:pending", {"job": 0})
        ada.set(classroom.state_key("ada"), f"{text} 1")  # her worker's state, in her namespace
        ada.hset(classroom.score_key("ada"), mapping={text: text, "delivered": text})
        with pytest.raises(echoq.PermissionDenied):  # quoted by the ACL log, shown as refused
            ada.get(f"emq:{{bob.{text}}}:pending")
    ada.hset(progress.key("ada"), mapping=fields)
    ada.hset(echoq.Keyspace(keys.queue).effects, b"\xff<img>", b"\xff")


def test_hostile_learner_text_never_runs_in_the_instructors_dashboard(page, klass: Workshop) -> None:  # noqa: F811
    write_hostile_everywhere(klass)
    classroom.produce(klass.instructor(), 3, klass="shown")
    env = throwaway_env("VALKEY_URL")
    env["ECHOQ_WORKSHOP"] = str(klass.dir)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    voila = start_voila(ROOT / "notebooks" / "dashboard.ipynb", env)
    try:
        # Voila runs the notebook before the page fires "load"; the wait below allows for that.
        page.goto(voila.url + "/", wait_until="commit")
        page.get_by_text("bad entries skipped").first.wait_for(timeout=120_000)
        board = page.locator(".echoq-board").first
        deadline = time.monotonic() + 5  # a few refreshes: each redraw is a chance to run a script
        while time.monotonic() < deadline:
            assert page.evaluate("() => window.__pwned") is None, "a learner's script ran"
            time.sleep(0.2)
        assert dialogs == []
        shown = board.inner_text()
        # Each hostile text is on the page as the text it is (cut to a readable length).
        for text in HOSTILE[:4]:
            assert text[:40] in shown, text
        assert "W" * 150 in shown and "W" * 300 not in shown
        assert page.locator(".echoq-board img, .echoq-board svg, .echoq-board iframe, .echoq-board script").count() == 0
        # Readable: no column pushed off the screen by one long value.
        width = page.evaluate("() => document.querySelector('.echoq-board').scrollWidth")
        assert width <= 1280 * 1.5, width
    finally:
        voila.stop()
