"""What a learner writes on the class server is data: the instructor's views escape it, its
readers skip (and count) what is malformed, and none of it crashes the instructor's tools.

The fast half: rendering and parsing, from values built here. The live half (a real class
server, learners writing hostile records) is in test_workshop_hostile.py and the browser
test."""

from __future__ import annotations

import re

from echoq.teaching import progress
from echoq.teaching.workshop import board, classroom, html
from tests.support.helpers import unwrapped

HOSTILE = [
    "<img src=x onerror=window.__pwned=1>",
    "</script><script>window.__pwned=1</script>",
    "\"'><svg onload=window.__pwned=1>",
    "x" * 5000,
    "bad \udcff bytes",  # what decoding non-UTF-8 with errors='surrogateescape' leaves
    "tab\tnewline\nbell\x07",
]


def hostile_board() -> board.BoardData:
    checks = [progress.CheckRecord(h, h, 3, False, h, 0) for h in HOSTILE]
    scores = {h[:40]: classroom.Score(1, 0, 1, 0, 0, worker=h) for h in HOSTILE}
    sb = classroom.Scoreboard(HOSTILE[0], 0, 1, dict.fromkeys(board.PLACES, 0), 0, scores)
    views = [board.LearnerView(h[:60], list(HOSTILE), checks, {h: {"pending": 1}}, classroom.Score()) for h in HOSTILE]
    refusals = [board.Refusal(h, h, h, h, 1, 0.0) for h in HOSTILE]
    return board.BoardData(0, views, refusals, sb, queues_found=1)


def test_the_board_escapes_every_value_a_learner_can_write() -> None:
    page = unwrapped(board.render(hostile_board()))
    assert "<img" not in page and "<svg" not in page and "<script" not in page and "</script" not in page
    assert "&lt;img src=x onerror=window.__pwned=1&gt;" in page  # shown, as text
    # No attribute a value could break out of: every quote inside a value is escaped.
    for attribute in re.findall(r"""\s(\w+)=(['"])(.*?)\2""", page):
        assert attribute[0] in ("class", "style"), attribute  # (no link: there is no hub here)
    # A very long value is cut to a readable length; control characters are dropped.
    assert "x" * (html.LONGEST + 1) not in page and "x" * (html.LONGEST - 1) in page
    assert "\x07" not in page and "\udcff" not in page


def test_render_escapes_by_default_and_keeps_only_its_own_markup() -> None:
    inner = html.render("<b>$v</b>", v="<i>")
    assert inner == "<b>&lt;i&gt;</b>" and isinstance(inner, html.Markup)
    assert html.render("<p>$a $b</p>", a=inner, b="<i>") == "<p><b>&lt;i&gt;</b> &lt;i&gt;</p>"
    assert html.esc(b"\xff\xfe<") == "\ufffd\ufffd&lt;"
    assert html.render("<td title='$t'>", t="' onmouseover='x") == "<td title='&#x27; onmouseover=&#x27;x'>"


def test_an_submissions_code_is_shown_whole_and_as_text() -> None:
    from echoq.teaching.workshop import history

    record = progress.CheckRecord("02", "claim", len(HOSTILE), False, HOSTILE[0], 0)
    whole = "local row = KEYS[1]\n\tlocal id = ARGV[1]  -- " + "0123456789" * 50
    kept = [progress.Submission(0, False, h, whole + h) for h in HOSTILE]
    shown = history.render_submissions(HOSTILE[0], HOSTILE[1], HOSTILE[2], record, kept)
    assert "<img" not in shown and "<script" not in shown and "<svg" not in shown
    # the code is shown whole, its lines kept (a name is cut and flattened; code is not)
    assert shown.count("local row = KEYS[1]\n    local id = ARGV[1]  -- " + "0123456789" * 50) == len(HOSTILE)
    assert shown.count("<details>") == len(HOSTILE)


def test_no_word_of_the_page_can_break_across_two_lines_but_junk_may() -> None:
    junk = "W" * 90
    page = html.keep_words(
        f"<style>.a-b{{x:y-z}}</style><td title='a-b-c'>lesson-02 is plain emq:{{ada.x}}:pending &amp;-x {junk}</td>"
    )
    assert page.startswith("<style>.a-b{x:y-z}</style><td title='a-b-c'>")  # tags and styles as they were
    assert "<span class='w'>lesson-02</span> is plain <span class='w'>emq:{ada.x}:pending</span>" in page
    assert "<span class='w'>&amp;-x</span>" in page  # an entity is one character, never split
    assert page.endswith(f"{'W' * 40}<wbr>{'W' * 40}<wbr>{'W' * 10}</td>")  # no person writes that: it may break
