"""The exercises, over their whole catalogue: every named wrong answer is rejected with its own
line, every wrong answer nobody named (wrong/unlisted-*) with a plain line naming what
differs, every right answer written another way passes, and no run's feedback says both ✓
and ✗ about one property (or claims anything after its ✗).

Each check runs the answer in real child processes against the real server, under the
failures of its lesson (SIGKILL, SIGSTOP, racing reapers), so these tests are the checks'
own proof: a check that let a named misconception pass, or failed a right answer, fails here.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

import echoq
from echoq.teaching import course, exercises, progress
from echoq.teaching.exercises import EXERCISES, GENERIC, Feedback, core
from echoq.teaching.exercises.core import Rejected

WRONG = [(key, m) for key, ex in EXERCISES.items() for m in ex.misconceptions]
RIGHT = [
    (key, label, source)
    for key, ex in EXERCISES.items()
    for label, source in [("solution", ex.solution)] + [(f"alternative-{n}", a) for n, a in enumerate(ex.alternatives)]
]


@pytest.fixture(autouse=True)
def fresh_hints():
    exercises.reset_hints()
    yield
    exercises.reset_hints()


def _verdicts_tool():
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "verdicts", Path(__file__).resolve().parent.parent / "tools" / "verdicts.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdicts"] = module
    spec.loader.exec_module(module)
    return module


verdicts = _verdicts_tool()
RECORDED = verdicts.recorded()


def assert_as_recorded(key: str, source: str, fb: Feedback) -> None:
    """Same answer, same verdict: this run's verdict and ✗ line (ids and measured quantities
    masked) are the ones tools/verdicts.py recorded from ten runs of the answer."""
    label = verdicts.label_of(key, source)
    got = (
        fb.ok,
        fb.misconception.name if fb.misconception else None,
        verdicts.mask(fb.failed[1]) if fb.failed else None,
    )
    assert got == RECORDED.get((key, label)), (
        f"{key} {label}: the verdict differs from the one recorded in tools/verdicts.json:\n  now      {got}\n"
        f"  recorded {RECORDED.get((key, label))}\n(after a deliberate change: tools/verdicts.py --record)"
    )


# The pictures a learner is shown first, and in the docs: each is drawn whole here (its PNG,
# its HTML, its live view) and its cost measured; every other rejected answer's picture is
# laid out and checked without being encoded.
SHOWN = {("claim", "row-not-active"), ("complete", "fence-on-attempts"), ("stall", "dead-in-two-places")}
PICTURE_CPU_S = 0.3  # what a picture may add to a check, drawn (CPU: a busy machine's waits are not its cost)


# Rejections whose ✗ line is about no queue of the run (a key asked of freshly started
# interpreters): their feedback says it has no picture.
NO_SCENE = {("charge", "unlisted-key-from-the-clock"), ("charge", "unlisted-key-from-hash")}


def assert_pictured(key: str, name: str, fb: Feedback) -> None:
    """A rejected answer's feedback carries its picture, drawn from the judge's own reads:
    everything it lights (a member, a set, a row, a field, a key outside the queue, a job of
    the scene) is named by the ✗ line, no text collides or is cut off, its alt text is the ✗
    line's words, and it costs a check less than PICTURE_CPU_S. A line about no queue of the
    run (NO_SCENE) has no picture, and its feedback says so."""
    from echoq.teaching.lab.judged.figure import figure_for
    from echoq.teaching.lab.judged.model import picture
    from echoq.teaching.lab.judged.words import FIELD_WORDS
    from tests.support.pictures import collisions

    line = fb.failed[1]
    if (key, name) in NO_SCENE:  # the check recorded that no queue of the run is the line's scene
        assert fb.evidence is None and core.NO_PICTURE in fb.notes, f"{key}/{name}: pictured:\n{fb}"
        return
    assert fb.evidence is not None, f"{key}/{name}: no picture of this rejection:\n{fb}"
    assert core.NO_PICTURE not in fb.notes
    shown = picture(fb)
    if shown.kind == "scene":  # the scene the check recorded for the line: the queue and jobs it names are drawn
        for queue in set(re.findall(r"\bx\d\d-[a-z_]+-\d+-\d+[a-z0-9-]*", line)):
            drawn = fb.evidence.queue.split(":")[-1]
            assert queue == drawn, f"{key}/{name}: the line is about {queue}, the picture shows {drawn}"
        for job in fb.evidence.jobs:  # on the board, unless the line says it is nowhere
            held = any(job in value for kind, value, _ttl in fb.evidence.board.values() if kind == "zset")
            assert held or f"job:{job}" in fb.evidence.board or re.search(r"\bno (set|key)\b", line), (
                f"{key}/{name}: the line names {job}, which the queue pictured does not hold: {line}"
            )
    assert shown.lit or shown.kind == "scene", f"{key}/{name}: the picture lights nothing the line names: {line}"
    for lit in shown.lit:
        part = lit.removeprefix("field ")
        said = FIELD_WORDS.get(part, (part,)) if lit.startswith("field ") else (part,)
        found = any(re.search(rf"\b{re.escape(w)}\b", line) if w[:1].isalpha() else w in line for w in said)
        assert found, f"{key}/{name}: the picture lights {lit!r}, which the ✗ line does not name: {line}"
    assert shown.alt.endswith(line)
    if (key, name) in SHOWN:  # first: its figure may be built for it, which is part of the cost
        assert_displayed(fb, shown)
    figure = figure_for(shown)
    with figure.lock:
        problems = collisions(figure)
    assert not problems, f"{key}/{name}: " + "\n".join(problems[:8])


def assert_named_as_seen(key: str, fb: Feedback) -> None:
    """A misconception of the exercise's catalogue is named only when its signature is in the
    run's evidence (the facts the check recorded, the ✗ line's details): the check called the
    signature, and here it is called again on what the run kept."""
    m = fb.misconception
    if m is None or m.name in GENERIC:
        return
    assert m.signature is not None, f"{key}/{m.name} is named with no signature to show for it"
    assert m.seen_in(fb.observed), f"{key}: [{m.title}] was named, but its signature is not in the run's evidence"


def assert_displayed(fb: Feedback, shown) -> None:
    """The feedback as a notebook gets it: its lines, the PNG and the same picture in the HTML
    with the ✗ line as alt text, drawn on display within PICTURE_CPU_S (its figure built, if no
    picture of its layout was drawn in this process before)."""
    import base64
    import html

    start = time.process_time()
    bundle = fb._repr_mimebundle_()
    took = time.process_time() - start
    assert took < PICTURE_CPU_S, f"drawing the picture took {took:.3f} CPU-s"
    assert bundle["text/plain"] == str(fb)
    png = base64.b64decode(bundle["image/png"])
    assert png.startswith(b"\x89PNG") and bundle["image/png"] in bundle["text/html"]
    assert f'alt="{html.escape(shown.alt)}"' in bundle["text/html"] and fb.failed[1] in shown.alt
    assert "application/vnd.jupyter.widget-view+json" not in bundle  # no kernel here: nothing to drive it
    if shown.kind == "sides":  # the live view steps the learner's board through its commands
        from echoq.teaching.lab.judged.model import picture
        from echoq.teaching.lab.judged.view import JudgedView

        view = JudgedView(fb)
        try:
            at_end = view.image.value
            diverged, _ = fb.evidence.divergence()
            assert diverged is not None and view.model.step == view.model.steps == len(fb.evidence.mine_commands)
            view.back_button.click()
            assert view.model.step == view.slider.value == view.model.steps - 1 and view.image.value != at_end
            view.slider.value = diverged  # the board just before the command that parted from the reference
            before, after = picture(fb, diverged), picture(fb, diverged + 1)
            assert before.boards[0] != after.boards[0], "the command that parted changed nothing on the board"
            assert [m for _, m in after.commands if "at" in m.split()] and "diverged" in dict(after.commands).get(
                next(t for t, m in after.commands if "diverged" in m), ""
            )
        finally:
            view.close()


def assert_well_formed(fb: Feedback) -> None:
    """One ✗ at most, last; no property both passed and failed; the rendering agrees."""
    props = [p for p, _ in fb.passed]
    assert len(props) == len(set(props)), f"a property was judged twice: {props}"
    if fb.failed is not None:
        assert fb.failed[0] not in props, f"{fb.failed[0]} passed AND failed in one run:\n{fb}"
        assert fb.lines[-1].startswith("✗") and sum(line.startswith("✗") for line in fb.lines) == 1, str(fb)
    text = str(fb).replace(core.NO_PICTURE, "")  # that note points at the ✗ line: it is no second mark
    assert text.count("✗") == (0 if fb.failed is None else 1)
    assert text.count("✓") == len(fb.passed)


def test_each_misconception_says_what_a_run_must_show_to_be_named() -> None:
    """Every misconception declares its signature: the naming code calls it,
    and the wrong answers' tests call it on each run's evidence (assert_named_as_seen)."""
    for key, ex in EXERCISES.items():
        for m in ex.misconceptions:
            assert m.signature is not None, f"{key}/{m.name} declares no signature"
            assert m.signature is None or not m.seen_in({}), f"{key}/{m.name}: its signature holds of nothing"


def test_every_exercise_has_its_catalogue() -> None:
    assert {ex.lesson for ex in EXERCISES.values()} == {"01", "02", "03", "04", "05", "06", "07"}
    for key, ex in EXERCISES.items():
        assert len(ex.misconceptions) >= 5, f"{key}: only {len(ex.misconceptions)} named misconceptions"
        assert len(ex.alternatives) >= 2, f"{key}: fewer than two right answers written another way"
        names = [m.name for m in ex.misconceptions]
        assert len(names) == len(set(names)), f"{key}: a misconception named twice"
        for m in ex.misconceptions:
            assert m.example.strip() and m.hint and m.stronger and m.title, f"{key}/{m.name} is incomplete"
            assert m.example not in (ex.solution, *ex.alternatives)
        assert all(alt.strip() != ex.solution.strip() for alt in ex.alternatives)


@pytest.mark.server
@pytest.mark.parametrize(("key", "misconception"), WRONG, ids=[f"{k}-{m.name}" for k, m in WRONG])
def test_a_named_wrong_answer_is_rejected_with_its_line(key: str, misconception) -> None:
    ex = EXERCISES[key]
    fb = ex.judge(misconception.example)
    assert not fb.ok, f"{key}: the wrong answer '{misconception.name}' passed:\n{fb}"
    assert fb.misconception is not None and fb.misconception.name == misconception.name, (
        f"{key}: expected [{misconception.title}], got:\n{fb}"
    )
    assert fb.failed[1].startswith(f"[{misconception.title}] ")
    assert_named_as_seen(key, fb)
    assert_well_formed(fb)
    assert_as_recorded(key, misconception.example, fb)
    assert_pictured(key, misconception.name, fb)
    assert ex.solution.strip() not in str(fb), "feedback must not give the solution away"


@pytest.mark.server
@pytest.mark.parametrize(("key", "label", "source"), RIGHT, ids=[f"{k}-{label}" for k, label, _ in RIGHT])
def test_a_right_answer_passes(key: str, label: str, source: str) -> None:
    fb = EXERCISES[key].judge(source)
    assert fb.ok, f"{key} {label} was rejected:\n{fb}"
    assert_well_formed(fb)
    assert_as_recorded(key, source, fb)
    assert fb.misconception is None and fb.hint is None


@pytest.mark.server
@pytest.mark.parametrize("key", list(EXERCISES))
def test_the_untouched_stub_is_no_answer_yet_and_nothing_else_is(key: str) -> None:
    """ "No answer yet" is said of the stub as the lesson gives it (or None), and of nothing
    else: an edited answer, however wrong, is judged."""
    ex = EXERCISES[key]
    fb = ex.judge("\n" + ex.stub + "\n")  # a lesson cell's string may start on a new line
    assert not fb.ok and fb.misconception.name == "no-answer", str(fb)
    assert fb.evidence is None and fb._repr_mimebundle_() is None  # nothing ran: no picture, the lines alone
    assert_well_formed(fb)
    assert exercises.EXERCISES[key].check(*[None] * max(1, len(ex.names))).misconception.name == "no-answer"
    for m in ex.misconceptions:
        assert not core.untouched(ex, ex.answer_from(m.example)), f"{key}/{m.name} taken for the stub"
    for source in [ex.solution, *ex.alternatives]:
        assert not core.untouched(ex, ex.answer_from(source))


@pytest.mark.server
def test_hints_grow_stronger_and_the_solution_waits_to_be_asked_for() -> None:
    ex = EXERCISES["claim"]
    wrong = next(m for m in ex.misconceptions if m.name == "popped-into-nowhere")
    first, second, third = (ex.judge(wrong.example) for _ in range(3))
    assert first.hint == wrong.hint and wrong.stronger not in first.hint
    assert second.hint.startswith(wrong.hint) and second.hint != first.hint and not second.solution_offered
    assert wrong.stronger not in second.hint  # close to the code only from the third try
    assert wrong.stronger in third.hint and third.solution_offered and "solution" in third.hint
    for fb in (first, second, third):
        assert ex.solution.strip() not in str(fb) and "HINCRBY" not in fb.failed[1]
    assert ex.judge(ex.solution).ok
    again = ex.judge(wrong.example)  # a pass resets the count of wrong tries
    assert not again.solution_offered


def _solution_calls(ex) -> set[str]:
    """The commands and calls the solution makes: ZADD, q.extend, idempotency_key=..."""
    import re

    found = set(re.findall(r"redis\.call\('([A-Z]+)'", ex.solution))
    found |= set(re.findall(r"\b([a-z_]+\.[a-z_]+)\(", ex.solution))
    found |= set(re.findall(r"\b([a-z_]+=[a-z_.]+)", ex.solution))
    return found


@pytest.mark.parametrize("key", list(EXERCISES))
def test_no_hint_before_the_third_try_names_the_solutions_code(key: str) -> None:
    ex = EXERCISES[key]
    calls = _solution_calls(ex)
    assert calls or ex.kind == "value"
    for m in [*ex.misconceptions, *GENERIC.values()]:
        for hint in (m.hint, core.AGAIN):
            assert not [c for c in calls if c in hint], f"{key}/{m.name}: {hint}"
            assert ex.solution.strip() not in hint


def test_the_right_answers_of_the_predictions_are_spread_over_the_positions() -> None:
    from collections import Counter

    from echoq.teaching.predictions import QUESTIONS

    where = Counter(answer for asked in QUESTIONS.values() for _, _, answer in asked.values())
    total = sum(where.values())
    assert {0, 1, 2} <= set(where), where
    assert max(where.values()) <= total / 3 + 1, f"too many right answers at one position: {where}"


@pytest.mark.server
def test_code_that_does_not_run_is_reported_in_one_line_not_raised() -> None:
    fb = exercises.check_claim_script("this is not lua")
    assert fb.misconception.name == "code-error" and "Error compiling script" in fb.failed[1]
    boom = exercises.check_charge_once(lambda claim, bank: 1 / 0)
    assert boom.misconception.name == "code-error" and "ZeroDivisionError" in boom.failed[1]
    assert "Nothing about the queue was judged yet" in boom.failed[1] and not boom.passed
    assert_well_formed(boom)


@pytest.mark.server
def test_code_that_fails_after_a_verified_property_does_not_unsay_it() -> None:
    # A key cut to the id's first 10 characters: JOB ids minted in one millisecond share them,
    # so the bank refuses the second order's charge -- after the first trial passed.
    def charge_order(claim, bank) -> None:
        card, cents = claim.payload.split()
        bank.charge(card, int(cents), idempotency_key=claim.job_id[:10])

    fb = exercises.check_charge_once(charge_order)
    assert fb.passed and fb.misconception.name == "code-error", str(fb)
    assert "judged yet" not in fb.failed[1] and "The checks above passed" in fb.failed[1]
    # The same answer, the same verdict: its lines quote the key it made, from a fresh JOB id
    # each run (its first 10 characters change every 8.192 s): the rest is word for word.
    key = re.compile(r"'JOB[0-9A-HJKMNP-TV-Z]{7}'")
    again = exercises.check_charge_once(charge_order).lines
    assert [key.sub("'<key>'", line) for line in again] == [key.sub("'<key>'", line) for line in fb.lines]
    assert key.search(fb.failed[1]), fb.failed[1]  # what the comparison sets aside is that key only


@pytest.mark.server
def test_a_loop_that_never_ends_is_killed_and_reported() -> None:
    def stuck(q, work, running):
        while True:
            pass

    fb = exercises.check_worker_loop(stuck)
    assert fb.misconception.name == "too-slow", str(fb)


@pytest.mark.server
def test_a_script_that_writes_then_never_ends_is_reported_as_the_servers_state_not_a_traceback() -> None:
    """Valkey does not stop a script that has written (UNKILLABLE): the server answers nothing
    else until it is restarted. The learner is told so, and why; the check does not crash on
    the server it can no longer use (no progress can be recorded there)."""
    from echoq.server import start_server

    stuck = EXERCISES["claim"].solution.replace(
        "local token = redis.call('HINCRBY', row, 'token', 1)",
        "local token = redis.call('HINCRBY', row, 'token', 1)\nwhile true do end",
    )
    assert stuck != EXERCISES["claim"].solution
    server = start_server()  # a private one: this answer leaves it unusable
    try:
        client = echoq.connect(server.url)
        fb = exercises.check_claim_script(stuck, client=client)
        assert not fb.ok and fb.misconception.name == "too-slow", str(fb)
        (note,) = [n for n in fb.notes if "UNKILLABLE" in n]
        assert "restart the kernel" in note and "could not be recorded" in note, note
        assert "✓" not in str(fb).split("✗", 1)[1]  # nothing after the failure claims success
        with pytest.raises(echoq.EchoqError, match="BUSY"):
            echoq.Queue("any", client).snapshot()  # the note is true: the server is held
    finally:
        server.kill()


def test_each_check_records_its_verdict_on_the_server(monkeypatch, valkey_client) -> None:
    monkeypatch.setenv("ECHOQ_LEARNER", "exercise-test")
    valkey_client.delete(progress.key())
    ex = EXERCISES["complete"]
    untouched = ex.judge(ex.stub)
    assert untouched.misconception.name == "no-answer" and "no submission was recorded" in untouched.failed[1]
    assert ("03", "complete") not in progress.read(valkey_client).checks  # the stub is no submission
    ex.judge(next(m for m in ex.misconceptions if m.name == "fence-on-state-only").example)
    record = progress.read(valkey_client).checks[("03", "complete")]
    assert (record.submissions, record.passed, record.misconception) == (1, False, "fence-on-state-only")
    ex.judge(ex.solution)
    record = progress.read(valkey_client, "exercise-test").checks[("03", "complete")]
    assert (record.submissions, record.passed, record.misconception) == (2, True, None)
    assert progress.key() == "emq:{exercise-test.course}:progress"
    # the check's scratch queues lived in the learner's namespace, and are gone
    assert not list(valkey_client.scan_iter(match="emq:{exercise-test.x*"))
    valkey_client.delete(progress.key())


def test_feedback_refuses_to_claim_anything_after_a_failure() -> None:
    fb = Feedback(EXERCISES["claim"])
    fb.good("a", "fine")
    with pytest.raises(Rejected):
        fb.fail("b", "left-in-pending", job="JOB1")
    with pytest.raises(RuntimeError):
        fb.good("c", "also fine?")
    fb = Feedback(EXERCISES["claim"])
    fb.good("a", "fine")
    with pytest.raises(RuntimeError):
        fb.fail("a", "left-in-pending", job="JOB1")


@pytest.mark.server
def test_feedback_renders_as_text_and_html() -> None:
    ex = EXERCISES["stall"]
    fb = ex.judge(next(m for m in ex.misconceptions if m.name == "stall-never-counted").example)
    text, page = str(fb), fb._repr_html_()
    assert text.startswith("Lesson 04 · the stall count: not yet") and "✗ [stalls never counted]" in text
    assert "Hint:" in text and "<li>✗ [stalls never counted]" in page


def test_the_solution_is_shown_only_when_asked_for() -> None:
    shown = exercises.solution("charge")
    assert "<details>" in shown.data and "idempotency_key=claim.job_id" in shown.data


@pytest.mark.parametrize("lesson", sorted({ex.lesson for ex in EXERCISES.values()} | {"00"}))
def test_every_prediction_explains_every_option(lesson: str) -> None:
    from echoq.teaching.predictions import QUESTIONS

    asked = QUESTIONS[lesson]
    assert len(asked) >= 2, f"lesson {lesson} asks fewer than two predictions"
    for key in asked:
        p = course.ask(lesson, key)
        explanations = [why for _, why in p.options]
        assert len(p.options) >= 3 and len(set(explanations)) == len(explanations), key
        for n, (_, why) in enumerate(p.options):
            verdict = p.choose(n)
            assert why in verdict and verdict.startswith("Right." if n == p.answer else "Not quite:")
        assert "Predict:" in repr(p) and all(text in repr(p) for text, _ in p.options)
        assert not any(why in repr(p) for why in explanations), "the static form must not give the answer away"


def test_the_course_page_lists_what_each_lesson_catches() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "course.md").read_text()
    assert exercises.catalogue_markdown() in page, (
        "docs/course.md's table of misconceptions is stale: paste exercises.catalogue_markdown() into it"
    )


def test_a_learner_who_may_not_script_kill_runs_a_lua_check_with_no_refusal(valkey_client, monkeypatch) -> None:
    """On a workshop's server a learner may not SCRIPT KILL (it could stop another learner's
    script): a check sends it only while a script still holds the server, so a Lua check
    runs as it does alone, and the ACL refuses the learner nothing."""
    user = f"nokill-{os.getpid()}"
    valkey_client.execute_command(
        # as a class's learner may: their own keys, and read the class's payload cap
        *("ACL", "SETUSER", user, "reset", "on", ">pw", f"~emq:{{{user}.*", "%R~emq:payload_bytes"),
        *("+@all", "-script|kill"),
    )
    try:
        kw = valkey_client.connection_pool.connection_kwargs
        learner_client = echoq.connect(f"redis://{user}:pw@{kw['host']}:{kw['port']}/0")
        monkeypatch.setenv("ECHOQ_LEARNER", user)
        fb = EXERCISES["claim"].judge(EXERCISES["claim"].solution, client=learner_client)
        assert fb.ok, fb
        assert [e for e in valkey_client.acl_log(count=100) if e["username"] == user] == []
    finally:
        valkey_client.execute_command("ACL", "DELUSER", user)


def test_a_prediction_names_the_learners_own_keys(monkeypatch) -> None:
    monkeypatch.setenv("ECHOQ_LEARNER", "ada")
    asked = course.ask("00", "where")
    shown = asked.question + " ".join(o + why for o, why in asked.options)
    assert "emq:{ada.lesson-00}:pending" in shown and "emq:{lesson-" not in shown
    monkeypatch.delenv("ECHOQ_LEARNER")
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    assert "emq:{lesson-00}:pending" in str(course.ask("00", "where").options)


# -- the whole contract: wrong answers nobody listed ----------------------------------------------

UNLISTED = [(key, name, source) for key, ex in EXERCISES.items() for name, source in ex.unlisted]


@pytest.mark.server
@pytest.mark.parametrize(("key", "name", "answer"), UNLISTED, ids=[f"{k}-{n}" for k, n, _ in UNLISTED])
def test_a_wrong_answer_nobody_listed_fails_on_the_difference_it_makes(key: str, name: str, answer: str) -> None:
    """The learner's move and the reference move on the same generated states: the first
    difference is the line, and it names the key."""
    ex = EXERCISES[key]
    head = answer.splitlines()[0]  # each file says in its first line what its feedback must name
    named = head.removeprefix("-- expect: ").removeprefix("# expect: ")
    assert named != head, f"{key}/wrong/{name} does not say what its feedback must name"
    first = ex.judge(answer)  # judged ten times by tools/verdicts.py: its verdict is the recorded one
    plain = first.misconception.name if first.misconception else None
    assert not first.ok and plain in ("differs-from-reference", "not-yet"), str(first)  # plain words, no name
    assert_named_as_seen(key, first)
    assert named in first.failed[1], first.failed[1]
    if plain == "differs-from-reference":
        assert "the reference move" in first.failed[1] and "emq:{q}" in first.failed[1]
    assert_well_formed(first)
    assert_as_recorded(key, answer, first)
    assert_pictured(key, name, first)
    assert ex.solution.strip() not in str(first)


@pytest.mark.server
def test_an_exercise_is_one_folder_found_by_itself(tmp_path) -> None:
    """A new exercise is a folder (stub, solution, right/, wrong/, check.py): discover()
    finds it, registers it, and its check judges its answers."""
    from pathlib import Path

    folder = tmp_path / "echo_value"
    (folder / "right").mkdir(parents=True)
    (folder / "wrong").mkdir()
    (folder / "stub.py").write_text("answer = None\n")
    (folder / "solution.py").write_text("answer = 42\n")
    (folder / "right" / "sum.py").write_text("answer = 40 + 2\n")
    (folder / "wrong" / "off-by-one.py").write_text("answer = 41\n")
    (folder / "wrong" / "nobody-listed.py").write_text("answer = 7\n")
    (folder / "check.py").write_text(
        """
from echoq.teaching.exercises.core import Misconception, check_runner, load, register

EXERCISE = register(load(__file__, key="echo_value", lesson="99", title="the answer", kind="value",
    names=("answer",), misconceptions=[Misconception("off-by-one", "one off", "{got} is one off.", "Count.", "42.")]))

@check_runner(EXERCISE)
def check_answer(run, answer):
    if answer == 42:
        run.good("answer", "42 it is.")
        return
    if answer == 41:
        run.fail("answer", "off-by-one", got=answer)
    run.fail("answer", "not-yet", what=f"{answer} is not the answer.")
"""
    )
    try:
        (found,) = exercises.discover(tmp_path)
        assert found.key == "echo_value" and EXERCISES["echo_value"] is found
        assert found.folder == folder and found.unlisted == [("nobody-listed", "answer = 7\n")]
        assert found.judge(found.solution).ok and all(found.judge(a).ok for a in found.alternatives)
        assert found.judge(found.misconceptions[0].example).misconception.name == "off-by-one"
        assert found.judge(found.unlisted[0][1]).misconception.name == "not-yet"
        assert found.judge(found.stub).misconception.name == "no-answer"
    finally:
        EXERCISES.pop("echo_value", None)
    here = Path(exercises.__file__).parent
    assert {p.name for p in here.iterdir() if (p / "check.py").is_file()} == set(EXERCISES)


@pytest.mark.server
def test_the_reference_and_each_right_answer_never_differ_on_any_seed() -> None:
    """The judge's own proof: on states from many seeds, the right answers written other ways
    leave every key as the reference does (so a difference is never the judge's noise)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from echoq.teaching.exercises import differential

    moves = {key: ex.move for key, ex in EXERCISES.items() if ex.move is not None}
    assert set(moves) == {"claim", "complete", "stall", "requeue", "two_step", "release"}
    for key, move in moves.items():  # what the ✓ line says the states hold, they hold
        made = differential.generated(move)
        assert {j.place for s in made for j in s.jobs} == set(differential.PLACES), key
        assert {s.tail for s in made} == set(differential.TAILS), key
        assert {j.id for s in made for j in s.jobs} >= set(differential.EDGE_IDS[:2]), key
        assert any(j.attempts > 1 for s in made for j in s.jobs) and any(j.stalled for s in made for j in s.jobs)
    client = echoq.connect()

    @settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**32))
    def agree(seed: int) -> None:
        for key, move in moves.items():
            ex = EXERCISES[key]
            reference = ex.answer_from(ex.solution) if move.python else ex.solution
            for alternative in ex.alternatives:
                answer = ex.answer_from(alternative) if move.python else alternative
                verdict = differential.judge(client, move, answer, reference, ex.lesson, trials=6, seed=seed)
                assert verdict.difference is None, f"{key}, seed {seed}: {verdict.difference}"

    agree()


def test_a_key_the_acl_refuses_is_that_mistake_not_a_code_error(valkey_client, monkeypatch) -> None:
    """In a workshop a learner may touch only its own namespace: a row key built without the
    queue's prefix is refused by the server, and the line says what that refusal means."""
    user = f"ns-{os.getpid()}"
    valkey_client.execute_command("ACL", "SETUSER", user, "reset", "on", ">pw", f"~emq:{{{user}.*", "+@all")
    try:
        kw = valkey_client.connection_pool.connection_kwargs
        learner_client = echoq.connect(f"redis://{user}:pw@{kw['host']}:{kw['port']}/0")
        monkeypatch.setenv("ECHOQ_LEARNER", user)
        wrong = EXERCISES["claim"].solution.replace("string.sub(KEYS[1], 1, -8) .. 'job:' .. id", "'job:' .. id")
        fb = EXERCISES["claim"].judge(wrong, client=learner_client)
        assert fb.misconception.name == "key-outside-namespace", str(fb)
        assert "your own queues" in fb.failed[1]
    finally:
        valkey_client.execute_command("ACL", "DELUSER", user)


@pytest.mark.server
def test_a_sample_of_mutants_of_each_solution_is_killed() -> None:
    """tools/mutants.py is the full run (docs/course.md shows its recorded score, and
    tests/test_mutants.py checks its equivalents); here every sixth non-equivalent mutant of
    the fast checks must be killed."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / "mutants.py"
    spec = importlib.util.spec_from_file_location("mutants", path)
    mutants = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = mutants  # its dataclasses look their module up there
    spec.loader.exec_module(mutants)
    client = echoq.connect()
    for key, ex in EXERCISES.items():
        if ex.kind == "value" or key in ("loop", "extend", "charge"):
            continue  # seconds per mutant: the tool's full run covers them
        made = [m for m in mutants.mutants(ex.solution, ex.kind) if mutants._compiles(m.text, ex.kind, client)]
        sample = [m for m in made if (key, m.name) not in mutants.EQUIVALENT][::6]
        assert sample
        for m in sample:
            fb = ex.judge(m.text)
            assert not fb.ok, f"{key}: the mutant '{m.name}' of the solution passed its check:\n{m.text}"


@pytest.mark.server
def test_on_a_server_with_many_keys_the_judge_reads_the_queues_known_keys(monkeypatch) -> None:
    """A class's server holds many keys: the differential judge then reads each queue's own
    keys instead of scanning the server on every trial, and judges alike -- the same line for
    every answer, save that a key outside the queue (a prefix cut short) only a SCAN can list
    is told by the difference it leaves in the queue instead."""
    from echoq.teaching.exercises import differential

    client = echoq.connect()
    for key in ("stall", "requeue", "complete"):
        ex = EXERCISES[key]
        right = [ex.solution, *ex.alternatives]
        for source in right + [wrong for _name, wrong in ex.unlisted]:
            lines = []
            for limit in (differential.SCAN_LIMIT, -1):
                monkeypatch.setattr(differential, "SCAN_LIMIT", limit)
                lines.append(differential.judge(client, ex.move, source, ex.solution, ex.lesson).difference)
            scanned, known = lines
            if source in right:
                assert scanned is None and known is None, (key, lines)
            elif scanned is not None and scanned.startswith("after your move emq:{q}:") and ":job:" not in scanned:
                assert known is not None, (key, lines)  # the stray key: told by what it left undone
            else:
                assert scanned == known, (key, lines)
    assert not list(client.scan_iter(match="emq:{d0*"))  # the judge's queues are gone


@pytest.mark.server
def test_a_recorded_submission_carries_the_learners_code(monkeypatch) -> None:
    """The submission history (echoq.teaching.progress) gets the text the learner submitted: a
    Lua script as given, a Python answer as the source of its functions."""
    seen: list[dict] = []
    monkeypatch.setattr(progress, "record_check", lambda *a, **kw: seen.append({"args": a, **kw}))
    claim, charge, two_step = EXERCISES["claim"], EXERCISES["charge"], EXERCISES["two_step"]
    wrong = next(m for m in claim.misconceptions if m.name == "popped-into-nowhere").example
    claim.judge(wrong)
    checking = next(m for m in charge.misconceptions if m.name == "check-then-act").example  # imports, a global
    charge.judge(checking)
    two_step.judge(two_step.solution)  # two functions and a value, from one cell
    codes = [s["code"] for s in seen]
    assert codes[:2] == [wrong, checking]
    assert codes[2].startswith(two_step.solution) and codes[2].count("def move_back") == 1
    claim.judge(claim.stub)  # the untouched stub is no submission: nothing recorded
    assert len(seen) == 3


@pytest.mark.server
def test_a_row_state_no_reader_knows_is_judged_by_what_the_server_holds() -> None:
    """A sweep that marks the dead row 'failed' (a state echoq never writes) is told what its
    row says, in its own words: the check reads the field as the server holds it."""
    ex = EXERCISES["stall"]
    failed = ex.solution.replace(
        "redis.call('HSET', row, 'state', 'dead')", "redis.call('HSET', row, 'state', 'failed')"
    )
    assert failed != ex.solution
    fb = ex.judge(failed)
    assert fb.misconception.name == "dead-row-not-marked" and "'failed'" in fb.failed[1], str(fb)
    assert_well_formed(fb)


@pytest.mark.server
def test_a_check_that_meets_what_it_was_not_written_for_says_so_and_never_raises(monkeypatch) -> None:
    """Anything unexpected inside a check (here: the check's own read of a row fails) becomes
    one line, "the check could not judge this", with the error and what the answer left on
    the server; nothing escapes to the learner's cell."""
    from echoq.teaching.exercises.stall import check as stall

    def unreadable(queue, job_id):
        raise KeyError("a row field the check did not expect")

    monkeypatch.setattr(stall, "row_state", unreadable)
    ex = EXERCISES["stall"]
    fb = ex.judge(ex.solution)
    assert not fb.ok and fb.misconception.name == "could-not-judge", str(fb)
    assert (
        "KeyError" in fb.failed[1]
        and "1 pending, 1 active; rows say state 'active' (1), state 'pending' (1)" in fb.failed[1]
    )
    assert_well_formed(fb)


@pytest.mark.server
def test_a_reply_difference_shows_each_reply_as_it_was_given(valkey_client) -> None:
    """The contract judges a complete's reply only as 'completed' or a refusal, but the line shows
    what each move replied: the reference's {'stale'}, never the judge's own word for its class."""
    from echoq.teaching.exercises import differential

    ex = EXERCISES["complete"]
    says_done = ex.solution.replace("return {'stale'}", "return {'completed'}")  # refuses, but says done
    verdict = differential.judge(valkey_client, ex.move, says_done, ex.solution, ex.lesson)
    assert verdict.difference is not None and "your move replied {'completed'}" in verdict.difference
    assert "the reference move replies {'stale'}" in verdict.difference and "'refused'" not in verdict.difference


@pytest.mark.server
def test_a_line_about_no_queue_says_it_has_no_picture() -> None:
    fb = exercises.check_two_step_reaper("not a function", print)  # fails before any queue is made
    assert not fb.ok and fb.evidence is None and core.NO_PICTURE in fb.notes
    assert fb._repr_mimebundle_() is None and core.NO_PICTURE in str(fb)


def test_a_count_deleted_equals_that_count_at_zero_and_nothing_else() -> None:
    """Every reader of the library takes a missing stalled/attempts/token/unstarted as 0: the
    judge does too, and only for those, and only against 0."""
    from echoq.teaching.exercises import differential

    clock = differential._Clock(0)
    row = "emq:{q}:job:JOB" + "0" * 26
    before = {"state": "dead", "stalled": "2", "payload": "work"}
    for name in sorted(differential.ZERO_WHEN_MISSING):
        assert differential._hash_difference(row, {}, {name: "0"}, {**before, name: "1"}, clock) is None, name
        assert differential._hash_difference(row, {name: "0"}, {}, {**before, name: "1"}, clock) is None, name
        assert differential._hash_difference(row, {}, {name: "2"}, {**before, name: "1"}, clock) is not None, name
    assert differential._hash_difference(row, {}, {"payload": ""}, before, clock) is not None  # a text is no count


def test_the_judges_fixed_time_is_what_a_move_reads_however_it_asks(valkey_client) -> None:
    """Both moves of a differential run read one fixed TIME: as a call, indexed, unpacked, as a
    statement of its own, by pcall, or by a command name in a variable; a command's error is
    still reported on the learner's own line."""
    from echoq.teaching.exercises import fixed_time

    reply = [str(fixed_time.SECONDS), str(fixed_time.MICROS)]
    script = (
        "redis.call('TIME')\n"
        "local a = redis.call('TIME')[1]\n"
        'local b, c = unpack(redis.pcall("time"))\n'
        "local name = 'TIME'\n"
        "local d = redis.call(name)\n"
        "return {a, c, d[1], d[2], redis.call('PING')}\n"
    )
    assert valkey_client.eval(fixed_time.lua(script), 0) == [*reply, *reply, "PONG"]
    failing = "local a = redis.call('TIME')\nlocal b = 2\nredis.call('ZADD', 'x')\n"
    with pytest.raises(Exception, match="@user_script:3"):
        valkey_client.eval(fixed_time.lua(failing), 0)
    client = fixed_time.Client(valkey_client)
    fixed = (fixed_time.SECONDS, fixed_time.MICROS)
    assert client.time() == client.execute_command("TIME") == fixed
    # In a pipeline, with MULTI or without, TIME keeps its place among the replies.
    for transaction in (True, False):
        with client.pipeline(transaction=transaction) as pipe:
            assert pipe.ping().time().execute_command("time").echo("x").execute() == [True, fixed, fixed, "x"]
    with client.pipeline() as pipe:  # WATCH runs each command at once, until MULTI
        pipe.watch("echoq-fixed-time")
        assert pipe.time() == fixed
        pipe.multi()
        assert pipe.time().get("echoq-fixed-time").execute() == [fixed, None]
    assert client.transaction(lambda pipe: (pipe.multi(), pipe.time()), "echoq-fixed-time") == [fixed]


def test_a_python_moves_pipelines_are_logged_as_the_server_ran_them(valkey_client) -> None:
    """A MULTI is one step of the picture, with what each key it wrote held after EXEC (no
    state between its commands was ever seen); a pipeline without MULTI is one step too; a
    command run at once (after WATCH) is a step of its own; ``delete`` is DEL."""
    from echoq.teaching import evidence
    from echoq.teaching.exercises import fixed_time
    from tests.support.servers import fresh_name

    name = fresh_name("trace")
    a, b = f"{name}:a", f"{name}:b"
    log: list[evidence.Command] = []
    r = evidence.Tracing(fixed_time.Client(valkey_client), log)
    with r.pipeline() as pipe:
        pipe.zadd(a, {"x": 1}).zadd(a, {"y": 2}).hset(b, "state", "pending").time().execute()
    with r.pipeline(transaction=False) as pipe:
        pipe.zrem(a, "x").execute()
    with r.pipeline() as pipe:
        pipe.watch(b)
        assert pipe.hget(b, "state") == "pending"
        pipe.multi()
        pipe.delete(b).execute()
    r.delete(a)
    assert [c.args[0] for c in log] == ["MULTI", "PIPELINE", "WATCH", "HGET", "MULTI", "DEL"]
    assert log[0].args[-1] == "EXEC" and "TIME" in log[0].args
    assert log[0].wrote == ((a, "zset", [("x", 1), ("y", 2)]), (b, "hash", {"state": "pending"}))
    assert log[1].wrote == ((a, "zset", [("y", 2)]),)
    assert log[4].args == ("MULTI", "DEL", b, "EXEC") and log[4].wrote == ((b, "none", None),)
    assert log[5].wrote == ((a, "none", None),)


def test_the_guide_to_writing_an_exercise_shows_the_release_exercise_as_it_is() -> None:
    """docs/exercises.md walks through the `release` exercise: the folder it lists is that folder,
    file for file; the `-- expect:` line it quotes is the unlisted wrong answer's first line; its
    check is as short as the guide says (at most 40 lines from its registration to its end); and
    the lesson cells it says the tool writes are in the lesson. (Its commands' paths and options
    are checked by tests/test_docs_names.py, as every page's.)"""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    guide = (root / "docs" / "exercises.md").read_text()
    ex = EXERCISES["release"]
    layout = re.search(r"```text\n(echoq/teaching/exercises/release/)\n(.*?)```", guide, re.S)
    assert layout is not None and root / layout.group(1) == ex.folder / ""
    listed = {line.split()[0] for line in layout.group(2).splitlines()}
    there = {
        p.relative_to(ex.folder).as_posix()
        for p in ex.folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert listed == there, f"the guide lists {sorted(listed ^ there)} wrongly"
    unlisted = next(u for u in ex.unlisted if u[0].endswith("row-still-active"))  # the one the guide quotes
    assert f"`{unlisted[1].splitlines()[0]}`" in guide
    code = (ex.folder / "check.py").read_text().split("\nRELEASE = register(", 1)[1]
    lines = 1 + sum(1 for line in code.splitlines()[1:] if line.strip())
    assert lines <= 40 and f"`release`'s check is {lines} lines" in " ".join(guide.split()), lines
    lesson = json.loads((root / "notebooks" / "05_worker_path.ipynb").read_text())
    sources = ["".join(cell["source"]) for cell in lesson["cells"]]
    assert f'my_release = """\n{ex.stub}"""' in sources and "exercises.check_release(my_release)" in sources
    assert 'exercises.solution("release")' in sources
