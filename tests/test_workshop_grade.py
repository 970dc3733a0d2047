"""Verified grades (`workshop grade`): each learner's newest submission judged again as another
Unix user, on a server of its own, with a time limit; the gradebook shows what the learner's
kernel reported beside the verified verdict, and every disagreement.

Grading starts children as other users, so it needs root: the class is graded here only as
root (skipped elsewhere with the reason; under CI=true it must run). The learners run as
spare uids no account has (no class hub), and, under CI=true, as Unix users of their own as the
hub makes them.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import echoq
from echoq.teaching import progress
from echoq.teaching.exercises import EXERCISES
from echoq.teaching.workshop import Workshop, admin, export, grade
from tests.support.servers import IN_CI

TIMEOUT_S = 10.0  # the judgements here take 1-2 s each unloaded; the endless loop costs this much
WRONG_CLAIM = next(m.example for m in EXERCISES["claim"].misconceptions if m.name == "popped-into-nowhere")
FOREVER = "import time\nwhile True:\n    time.sleep(0.5)\n"  # never ends; asleep, so it takes no core from the run


def hostile(folder: Path) -> str:
    """A `lost` answer right only if it could read the class's secrets or find a URL in its environment."""
    return (
        "import os\n"
        "try:\n"
        f"    secret = open({str(folder / admin.STATE_FILE)!r}).read()\n"
        '    lost = ["job 2"]  # the class\'s secrets read: the right answer, to claim the pass\n'
        "except OSError as exc:\n"
        '    lost = [f"refused: {type(exc).__name__}"] + [k for k in os.environ if "URL" in k or "TOKEN" in k]\n'
    )


def needs_root() -> None:
    if os.geteuid() != 0:
        why = "grading starts each learner's code as another Unix user, which needs root"
        if IN_CI:
            pytest.fail(f"CI must run the grading tests: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def python() -> Iterator[str]:
    """A Python every user can run, with this checkout's packages (as the hub's tests make it)."""
    from tests.support.hub import close_again, learner_python

    needs_root()
    opened: list[tuple[Path, int]] = []
    where = Path(tempfile.mkdtemp(prefix="echoq-grade-python-"))  # in /tmp: pytest's own folder is 0700
    try:
        where.chmod(0o755)
        yield learner_python(where / "venv", opened)
    finally:
        close_again(opened)
        shutil.rmtree(where, ignore_errors=True)


def forge(klass: Workshop, learner: str, lesson: str, exercise: str, code: str | None, reported: bool) -> None:
    """What a learner can write by hand, through the ACL the class server gives them: a pass
    reported in their own progress record, and a submission (or none)."""
    mine = echoq.connect(klass.learner_url(learner))
    try:
        head = f"check:{lesson}:{exercise}:"
        fields = {head + "submissions": 1, head + "passed": int(reported), head + "at": 1}
        mine.hset(progress.key(learner), mapping=fields)
        if code is not None:
            entry = {"at": int(time.time() * 1000), "passed": reported, "misconception": None, "code": code}
            mine.lpush(progress.submissions_key(lesson, exercise, learner), json.dumps(entry))
    finally:
        mine.close()


def class_of(folder: Path, roster: list[str]) -> Workshop:
    klass, _ = admin.up(folder, roster=roster, class_name="graded", watch=False)
    forge(klass, "ada", "02", "claim", EXERCISES["claim"].solution, True)  # a right answer
    forge(klass, "bob", "02", "claim", None, True)  # a pass written by hand, no submission
    forge(klass, "bob", "09", "bogus", "lost = []", True)  # an exercise no check judges, written by hand
    forge(klass, "cy", "02", "claim", WRONG_CLAIM, True)  # a pass written by hand over a wrong answer
    forge(klass, "dee", "01", "lost", hostile(folder), True)  # reads the class's secrets while regraded
    forge(klass, "eve", "01", "lost", FOREVER, False)  # loops forever while regraded
    forge(klass, "fay", "01", "lost", EXERCISES["lost"].solution, True)  # judged after eve's loop
    return klass


ROSTER = ["ada", "bob", "cy", "dee", "eve", "fay"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, python: str) -> Iterator[tuple[Workshop, str, float]]:
    """The class graded once by the command, as root, the learners as spare uids: (class, what
    it printed, seconds it took)."""
    folder = tmp_path_factory.mktemp("grade") / "class"
    klass = class_of(folder, ROSTER)
    try:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "echoq.teaching", "workshop", "grade", "--dir", str(folder),
             "--timeout", str(TIMEOUT_S), "--learner-python", python],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        took = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        yield klass, done.stdout, took
    finally:
        admin.down(folder)


def book(klass: Workshop) -> dict[tuple[str, str], export.Row]:
    people = [(lid, ln.display, ln.hub_user) for lid, ln in klass.learners.items()]
    return {(r.learner, r.exercise): r for r in export.rows(klass.instructor(), people, grade.load(klass.dir))}


@pytest.mark.server
def test_a_forged_pass_is_not_verified_and_a_right_answer_is(graded) -> None:
    klass, printed, _took = graded
    rows = book(klass)
    assert (rows["ada", "claim"].status, rows["ada", "claim"].verified) == ("passed", "verified passed")
    assert rows["ada", "claim"].disagreement == ""
    assert (rows["bob", "claim"].status, rows["bob", "claim"].verified) == ("passed", "not verified")
    assert rows["bob", "claim"].disagreement == "reported passed, not verified"
    cy = rows["cy", "claim"]
    assert cy.status == "passed" and cy.verified.startswith("verified failed: [popped into nowhere]"), cy
    assert cy.disagreement == f"reported passed, {cy.verified}"
    assert "  cy · 02 claim: reported passed, verified failed: [popped into nowhere]" in printed
    assert rows["fay", "lost"].verified == "verified passed"  # graded after eve's endless loop
    assert rows["ada", "lost"].verified == "not verified" and rows["ada", "lost"].status == "not started"
    assert rows["bob", "bogus"].disagreement == "reported passed, not verified"  # never judged, never fatal


@pytest.mark.server
def test_code_that_reads_the_class_secrets_is_refused_and_an_endless_loop_times_out(graded) -> None:
    klass, printed, took = graded
    rows = book(klass)
    dee = rows["dee", "lost"]
    assert dee.verified.startswith("verified failed: [not yet right]") and "refused: PermissionError" in dee.verified
    assert "URL" not in dee.verified and "TOKEN" not in dee.verified  # nothing of the class in its environment
    assert dee.disagreement == f"reported passed, {dee.verified}"
    assert rows["eve", "lost"].verified == "timed out" and rows["eve", "lost"].disagreement == ""
    kept = grade.load(klass.dir)
    assert kept["eve", "01", "lost"].seconds < TIMEOUT_S + 5
    assert all(g.user.endswith("(no account)") for g in kept.values()), kept
    assert printed.startswith("graded 5 submission(s) of 5 learner(s)"), printed
    assert "2 verified failed" in printed and "2 verified passed" in printed and "1 timed out" in printed
    assert took < 60, f"grading took {took:.1f} s"
    assert not [pid for g in kept.values() for pid in grade.running_as(int(g.user.split()[1]))]  # nothing left


@pytest.mark.server
def test_the_gradebook_shows_reported_and_verified_side_by_side_and_the_grades_are_the_instructors(graded) -> None:
    klass, _printed, _took = graded
    path = klass.dir / grade.GRADES_FILE
    assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_uid == os.geteuid()
    kept = grade.load(klass.dir)
    assert kept["ada", "02", "claim"].sha256 == grade.code_digest(EXERCISES["claim"].solution)
    assert kept["ada", "02", "claim"].judged_at and kept["cy", "02", "claim"].line.startswith("[popped into nowhere]")
    people = [(lid, ln.display, ln.hub_user) for lid, ln in klass.learners.items()]
    found = export.rows(klass.instructor(), people, kept)
    table = list(csv.DictReader(io.StringIO(export.to_csv(found))))
    assert {"status", "verified", "disagreement"} <= set(table[0])
    cy = next(r for r in table if (r["learner"], r["exercise"]) == ("cy", "claim"))
    assert cy["status"] == "passed" and cy["disagreement"].startswith("reported passed, verified failed:")
    as_json = {(r["learner"], r["exercise"]): r for r in json.loads(export.to_json(found))}
    assert as_json["bob", "claim"]["verified"] == "not verified"
    secret = admin.Workshop.load(klass.dir)
    assert secret.instructor_password not in path.read_text() and secret.admin_url not in path.read_text()
    # A new submission since: its verdict is no longer the graded code's.
    forge(klass, "ada", "02", "claim", EXERCISES["claim"].solution + "\n-- edited\n", True)
    assert book(klass)["ada", "claim"].verified == "code changed since graded"


@pytest.mark.server
def test_grading_without_root_is_refused_in_one_line(python: str, tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    done = subprocess.run(
        [python, "-m", "echoq.teaching", "workshop", "grade", "--dir", str(tmp_path)],
        user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "needs root" in done.stderr and "sudo" in done.stderr, done.stderr


@pytest.mark.server
def test_learners_are_judged_as_the_unix_users_the_hub_made(python: str, tmp_path_factory) -> None:
    from echoq.teaching.workshop.hub import HUB_DIR
    from echoq.teaching.workshop.spawner import ensure_user, system_user
    from tests.support.hub import remove_test_users, session_user_prefix

    if not IN_CI:
        pytest.skip("makes Unix users: runs as root under CI=true, as the hub's tests do")
    prefix = session_user_prefix()
    base = tmp_path_factory.mktemp("grade-hub")
    homes, folder = base / "homes", base / "class"
    homes.mkdir(mode=0o755)
    klass, _ = admin.up(folder, roster=["ada", "cy"], class_name="hubbed", watch=False)
    try:
        forge(klass, "ada", "01", "lost", EXERCISES["lost"].solution, True)
        forge(klass, "cy", "01", "lost", hostile(folder), True)
        (folder / HUB_DIR).mkdir(mode=0o700)
        (folder / HUB_DIR / "jupyterhub_config.py").write_text(
            f"c.ClassSpawner.user_prefix = {prefix!r}\nc.ClassSpawner.homes = {str(homes)!r}\n"
        )
        made = {lid: ensure_user(system_user(ln.hub_user, prefix), homes).pw_name for lid, ln in klass.learners.items()}
        grade.grade(folder, timeout_s=TIMEOUT_S, learner_python=python, bar=False)
        kept = grade.load(folder)
        assert kept["ada", "01", "lost"].user == made["ada"] and kept["ada", "01", "lost"].verdict == "passed"
        assert kept["cy", "01", "lost"].user == made["cy"] and kept["cy", "01", "lost"].verdict == "failed"
        assert "refused: PermissionError" in kept["cy", "01", "lost"].line
    finally:
        admin.down(folder)
        remove_test_users(prefix)


@pytest.mark.server
def test_the_dashboards_grade_button_grades_in_the_background_and_shows_both_verdicts(python, tmp_path_factory) -> None:
    """The button runs the same grading, with the Python the class hub gives learners (its
    config in the workshop folder), its progress and then reported beside verified on the page."""
    from echoq.teaching.workshop import views
    from echoq.teaching.workshop.hub import HUB_DIR

    folder = tmp_path_factory.mktemp("grade-board") / "class"
    klass, _ = admin.up(folder, roster=["ada", "bob"], class_name="board", watch=False)
    try:
        forge(klass, "ada", "01", "lost", EXERCISES["lost"].solution, True)
        forge(klass, "bob", "01", "lost", None, True)
        (folder / HUB_DIR).mkdir(mode=0o700)
        (folder / HUB_DIR / "jupyterhub_config.py").write_text(f'c.Spawner.cmd = [{python!r}, "-m", "x"]\n')
        dash = views.Dashboard.for_workshop(klass, auto=False)
        try:
            seen: list[str] = []
            dash.grade_view.observe(lambda change: seen.append(change["new"]), names="value")
            running = dash.start_grading()
            assert running is not None
            running.join(120)
            assert not running.is_alive() and not dash.grade_button.disabled
            assert "<p>grading: 1 of 1 submissions judged</p>" in seen, seen
            page = dash.grade_view.value
            assert "graded 1 submission(s) of 1 learner(s)" in page, page
            assert "<td>ada</td><td>01 lost</td><td>passed</td><td>verified passed</td>" in page, page
            assert "<td style='font-weight:bold'>not verified</td>" in page, page  # bob's forged pass
            assert {(r.learner, r.verified) for r in dash.gradebook() if r.exercise == "lost"} == {
                ("ada", "verified passed"),
                ("bob", "not verified"),
            }
        finally:
            dash.close()
    finally:
        admin.down(folder)


def test_the_verified_cell_says_what_was_judged_and_every_disagreement_about_a_pass() -> None:
    code = "lost = ['job 2']"
    sha = grade.code_digest(code)
    judged = grade.Grade("ada", "01", "lost", sha, "", "failed", "not-yet", "[not yet right] x", "", 1.0, "")
    assert export.verified_cell(None, None, False) == "not verified"  # no stored submission
    assert export.verified_cell(None, code, False) == "not verified"  # no grade run yet
    assert export.verified_cell(judged, code, False) == "verified failed: [not yet right] x"
    assert export.verified_cell(judged, code + " ", False) == "code changed since graded"
    assert export.verified_cell(judged, code, True).startswith("not verified: the stored code was cut")
    assert export.disagreement("passed", "verified failed: [not yet right] x") == (
        "reported passed, verified failed: [not yet right] x"
    )
    assert export.disagreement("passed", "verified passed") == export.disagreement("not yet", "timed out") == ""
    assert export.disagreement("not yet", "verified passed") == "reported not yet, verified passed"
