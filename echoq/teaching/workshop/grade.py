"""Verified grades: each learner's newest submission judged again, out of the learner's reach.

The gradebook's ``status`` is what the learner's kernel reported: the check ran there, with the
learner's rights, and wrote its verdict into the learner's own progress record, which the learner
may also write by hand. ``python -m echoq.teaching workshop grade`` judges again, on the
instructor's side, the newest submission of every learner at every exercise:

* the submitted code, read through the admin connection, run by the same check
  (``EXERCISES[key].judge``) in a child process started as that learner's own Unix user when the
  class hub made one (``<prefix><learner id>``, the prefix and homes read from the hub's config in
  the workshop folder), else as a uid no account on the machine has (``SPARE_FROM`` up: it
  owns nothing, so it reads nothing of the class); never as root or the instructor;
* the child on a throwaway Valkey of its own (in a fresh folder the grading user owns, never the
  class server), with an environment holding no ``VALKEY_URL`` and no secret of the class, a
  time limit (``--timeout``, 120 s) after which its whole process group is killed ("timed out");
* its one JSON verdict line on standard output (anything else: "failed to judge");
* two judgements at a time at most, each under a uid of its own (a spare uid is used by one
  judgement at a time, and every process left running as it is killed after it); a submission
  judged before with the same code and the same checks keeps its verdict.

The verdicts go to ``grades.json`` in the workshop folder (mode 0600, the instructor's): per
learner and exercise the sha256 of the code judged, when, the verdict and its ✗ line. The
gradebook (:mod:`.export`) shows beside each reported status the verified one
(:func:`verified_cell`) and every disagreement. Grading needs root, to start children as other
users: without it the command refuses in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...errors import InvalidArgument
from .export import code_digest, disagreement, verified_cell

__all__ = [
    "GRADES_FILE",
    "Grade",
    "grade",
    "load",
    "verified_cell",
    "disagreement",
    "code_digest",
]

GRADES_FILE = "grades.json"
DEFAULT_TIMEOUT_S = 120.0
JOBS = 2  # the machine a class runs on may have two cores: the class server needs one
KEPT = ("passed", "failed")  # verdicts a later run keeps for the same code and the same checks
SAID = {"passed": "verified passed", "failed": "verified failed"}


@dataclass(frozen=True)
class Grade:
    learner: str
    lesson: str
    exercise: str
    sha256: str  # of the code judged (as the submission stored it)
    judged_at: str  # this machine's local time, ISO 8601 with its offset
    verdict: str  # "passed", "failed", "timed out", "failed to judge", "truncated"
    misconception: str | None
    line: str | None  # the ✗ line (failed), or why it could not be judged
    user: str  # the Unix user the code ran as
    seconds: float
    checks: str  # the digest of the code that judged it (exercises.judging_digest)


def load(folder: Path) -> dict[tuple[str, str, str], Grade]:
    """The verified verdicts ``grade`` wrote in the workshop ``folder`` (none yet: empty)."""
    path = Path(folder) / GRADES_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        found = [Grade(**item) for item in data["grades"]]
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgument(f"{path} is not a grades file `workshop grade` wrote ({exc}): move it away") from None
    return {(g.learner, g.lesson, g.exercise): g for g in found}


# ---------------------------------------------------------------- who the code runs as


def _hub_config(folder: Path) -> str:
    from .hub import HUB_DIR

    try:
        return (Path(folder) / HUB_DIR / "jupyterhub_config.py").read_text(encoding="utf-8")
    except OSError:
        return ""


def hub_users(folder: Path) -> tuple[str, str] | None:
    """(user prefix, homes) of the class hub ``workshop hub`` configured in ``folder``; None
    when it made none."""
    text = _hub_config(folder)
    prefix = re.search(r"^c\.ClassSpawner\.user_prefix = '([^'\\]*)'$", text, re.M)
    homes = re.search(r"^c\.ClassSpawner\.homes = '([^'\\]*)'$", text, re.M)
    return (prefix.group(1), homes.group(1)) if prefix and homes else None


def hub_python(folder: Path) -> str | None:
    """The Python the class hub runs learners' servers with (its ``--learner-python``), if any."""
    found = re.search(r"^c\.Spawner\.cmd = \['([^'\\]+)', ", _hub_config(folder), re.M)
    return found.group(1) if found else None


def grading_user(hub_user: str, hub: tuple[str, str] | None) -> pwd.struct_passwd | None:
    """The learner's own Unix user when the class hub made it; else None (a spare uid). Never
    root or this process's own user."""
    from .spawner import refuse_unsafe, system_user

    if hub is not None:
        prefix, homes = hub
        with contextlib.suppress(KeyError, OSError):
            entry = pwd.getpwnam(system_user(hub_user, prefix))
            if Path(entry.pw_dir).parent.resolve() == Path(homes).resolve():
                try:
                    refuse_unsafe(entry)
                except RuntimeError as exc:  # root's, or this process's: one line, nothing judged
                    raise InvalidArgument(str(exc)) from None
                return entry
    return None


SPARE_FROM = 2_147_480_000  # the first uid tried as a spare: far above any account's


def spare_uids(count: int) -> list[int]:
    """``count`` uids (each its own gid) that no account or group on this machine has."""
    import grp

    found: list[int] = []
    uid = SPARE_FROM
    while len(found) < count:
        uid += 1
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(uid)
            continue
        except KeyError:
            found.append(uid)
    return found


def no_account(uid: int, home: str = "/nonexistent") -> pwd.struct_passwd:
    return pwd.struct_passwd((f"uid {uid} (no account)", "x", uid, uid, "", home, "/usr/sbin/nologin"))


def running_as(uid: int) -> list[int]:
    """The pids of the processes running as ``uid`` (a zombie is gone, only not yet reaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
    return found


def kill_everything_of(uid: int, timeout_s: float = 10.0) -> None:
    """SIGKILL every process running as ``uid`` (a spare uid's: nobody else's), until none is left."""
    deadline = time.monotonic() + timeout_s
    while (left := running_as(uid)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def check_root() -> None:
    if os.geteuid() != 0:
        raise InvalidArgument(
            "grading runs each learner's code as another Unix user (their own, or a uid of no account), which "
            "needs root: run `sudo python -m echoq.teaching workshop grade`"
        )


# ---------------------------------------------------------------- one judgement


def _child_env(home: Path) -> dict[str, str]:
    # Nothing of the instructor's environment: no VALKEY_URL, no password, no hub token.
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def judge_as(
    entry: pwd.struct_passwd, python: str, exercise: str, code: str, timeout_s: float
) -> tuple[str, str | None, str | None]:
    """(verdict, misconception, line) of ``code`` at ``exercise``, judged in a child run as
    ``entry`` in a fresh folder it owns, killed with its process group at ``timeout_s``."""
    place = Path(tempfile.mkdtemp(prefix="echoq-grade-"))
    # What the child prints goes to files of ours (it holds only their descriptors), each cut
    # at OUTPUT_BYTES by the child's own file-size limit: never into this process's memory.
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        try:
            os.chown(place, entry.pw_uid, entry.pw_gid)
            child = subprocess.Popen(
                [python, "-m", __name__, "--judge", exercise],
                stdin=subprocess.PIPE, stdout=stdout, stderr=stderr,
                user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd=place, env=_child_env(place),
                start_new_session=True,
            )  # fmt: skip
            try:
                assert child.stdin is not None
                with contextlib.suppress(BrokenPipeError):
                    child.stdin.write(code.encode("utf-8", "surrogatepass"))
                    child.stdin.close()
                child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(child.pid)
                child.wait()
                return "timed out", None, f"still running after {timeout_s:g} s: stopped"
            finally:
                _kill_group(child.pid)  # whatever it left behind in its group
            out, err = _read(stdout), _read(stderr)
        finally:
            shutil.rmtree(place, ignore_errors=True)
        lines = out.splitlines()
        try:
            if len(lines) != 1:
                raise ValueError(f"{len(lines)} lines on standard output")
            said = json.loads(lines[0])
            passed, name, line = bool(said["passed"]), said["misconception"], said["line"]
        except (ValueError, KeyError, TypeError) as exc:
            last = (err.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
            return "failed to judge", None, f"{exc}; {last[:300]}"
        return ("passed", None, None) if passed else ("failed", name, line)


OUTPUT_BYTES = 1 << 20  # the most the judging child may write to a file (its output included)


def _read(file: Any) -> str:
    file.seek(0)
    return file.read(OUTPUT_BYTES).decode("utf-8", "replace")


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _judge_here(exercise: str) -> int:
    """The child: the code on standard input judged on a server of its own; one JSON line out."""
    import resource

    # Before any of the answer runs: a hard limit it cannot raise again.
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_BYTES, OUTPUT_BYTES))
    code = sys.stdin.read()
    verdict_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the answer prints goes to standard error, never beside the verdict
    sys.stdout = sys.stderr
    from ...server import connect, start_server
    from ..exercises import EXERCISES

    place = Path.cwd() / "valkey"
    place.mkdir(mode=0o700)
    server = start_server(workdir=place)
    try:
        try:
            fb = EXERCISES[exercise].judge(code, client=connect(server.url))
            verdict: dict[str, Any] = {
                "passed": fb.ok,
                "misconception": fb.misconception.name if fb.misconception else None,
                "line": fb.failed[1] if fb.failed else None,
            }
        except BaseException as exc:  # the answer's own code raised (or exited) before the check ran
            words = str(exc).splitlines()[0][:200] if str(exc) else ""
            verdict = {
                "passed": False,
                "misconception": "code-error",
                "line": f"Your code raised {type(exc).__name__}" + (f": {words}" if words else ""),
            }
    finally:
        server.stop()
    verdict_out.write(json.dumps(verdict) + "\n")
    verdict_out.flush()
    os._exit(0)  # no exit handler the answer may have registered runs


# ---------------------------------------------------------------- the class


def grade(
    folder: str | Path | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    learner_python: str | None = None,
    jobs: int = JOBS,
    progress: Callable[[int, int], None] | None = None,
    bar: bool = True,
) -> list[str]:
    """Judge every learner's newest submission at every exercise; write ``grades.json``; the
    lines to print. ``progress(done, total)`` is called after each judgement."""
    from ..exercises import EXERCISES, judging_digest
    from . import export
    from .admin import Workshop, write_private
    from .hub import check_learner_python

    if not 0 < timeout_s <= 3600:
        raise InvalidArgument(f"--timeout must be more than 0 and at most 3600 seconds, got {timeout_s:g}")
    if not 1 <= jobs <= JOBS:
        raise InvalidArgument(f"jobs must be 1 or {JOBS}, got {jobs}")
    check_root()
    workshop = Workshop.load(folder)
    python = learner_python or hub_python(workshop.dir) or sys.executable
    if not Path(python).is_file():
        raise InvalidArgument(f"--learner-python {python}: no such file")
    hub = hub_users(workshop.dir)
    before = load(workshop.dir)
    people = [(lid, ln.display, ln.hub_user) for lid, ln in workshop.learners.items()]
    rows = export.rows(workshop.admin(), people)
    users = {lid: grading_user(hub_user, hub) for lid, _n, hub_user in people}
    started = time.monotonic()
    digests: dict[str, str] = {}
    grades: dict[tuple[str, str, str], Grade] = {}
    todo = []
    counts: Counter[str] = Counter()
    for row in rows:
        if not row.last_submitted or not row.last_code or row.exercise not in EXERCISES:
            continue  # no stored code ("not verified"), or an exercise of no check (a record written by hand)
        where = (row.learner, row.lesson, row.exercise)
        sha = code_digest(row.last_code)
        checks = digests.setdefault(row.exercise, judging_digest(row.exercise))
        old = before.get(where)
        if row.last_code_truncated:
            grades[where] = Grade(*where, sha, export.local_iso(int(time.time() * 1000)), "truncated", None,
                                  "the stored code was cut at 8,000 characters: it cannot be judged",
                                  "", 0.0, checks)  # fmt: skip
            counts["not judged (code cut at 8,000 characters)"] += 1
        elif old is not None and old.sha256 == sha and old.checks == checks and old.verdict in KEPT:
            grades[where] = old
            counts["unchanged since the last run"] += 1
        else:
            todo.append((row, sha, checks))
    spares = spare_uids(jobs)
    spare: queue.SimpleQueue[int] = queue.SimpleQueue()
    for uid in spares:
        spare.put(uid)
    if todo:  # the learners' Python must run for them: tried once, as the first grading user
        entry = users[todo[0][0].learner] or no_account(spares[0])
        with tempfile.TemporaryDirectory(prefix="echoq-grade-") as place:
            os.chown(place, entry.pw_uid, entry.pw_gid)
            check_learner_python(python, pwd.struct_passwd((*entry[:5], place, entry.pw_shell)))
    done = 0
    lock = threading.Lock()
    bar_ = _bar(len(todo)) if bar and todo else None

    def one(item: tuple[Any, str, str]) -> Grade:
        nonlocal done
        row, sha, checks = item
        uid = spare.get() if users[row.learner] is None else None
        entry = users[row.learner] or no_account(uid or 0)
        try:
            t0 = time.monotonic()
            verdict, name, line = judge_as(entry, python, row.exercise, row.last_code, timeout_s)
            took = round(time.monotonic() - t0, 2)
        finally:
            if uid is not None:
                kill_everything_of(uid)  # what escaped the process group, and its server
                spare.put(uid)
        found = Grade(row.learner, row.lesson, row.exercise, sha, export.local_iso(int(time.time() * 1000)),
                      verdict, name, line, entry.pw_name, took, checks)  # fmt: skip
        with lock:
            done += 1
            if bar_ is not None:
                bar_.update(1)
            if progress is not None:
                progress(done, len(todo))
        return found

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for found in pool.map(one, todo):
                grades[(found.learner, found.lesson, found.exercise)] = found
                counts[SAID.get(found.verdict, found.verdict)] += 1
    finally:
        if bar_ is not None:
            bar_.close()
    ordered = [grades[k] for k in sorted(grades)]
    path = workshop.dir / GRADES_FILE
    write_private(path, json.dumps({"grades": [asdict(g) for g in ordered]}, ensure_ascii=False, indent=1) + "\n")
    shown = ", ".join(f"{n} {what}" for what, n in sorted(counts.items(), key=lambda c: -c[1])) or "nothing submitted"
    lines = [
        f"graded {len(grades)} submission(s) of {len({g.learner for g in ordered})} learner(s) in "
        f"{time.monotonic() - started:.1f} s ({len(todo)} judged): {shown}",
        f"verified verdicts written to {path} (mode 0600)",
    ]
    for row in rows:
        g = grades.get((row.learner, row.lesson, row.exercise))
        code = row.last_code if row.last_submitted and row.last_code else None
        differ = disagreement(row.status, verified_cell(g, code, row.last_code_truncated))
        if differ:
            lines.append(f"  {row.learner} · {row.lesson} {row.exercise}: {differ}")
    return lines


def _bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="grading", unit="submission", file=sys.stderr, disable=None)


if __name__ == "__main__":  # the judging child: python -m echoq.teaching.workshop.grade --judge KEY
    if len(sys.argv) != 3 or sys.argv[1] != "--judge":
        sys.exit("usage: python -m echoq.teaching.workshop.grade --judge EXERCISE (code on standard input)")
    sys.exit(_judge_here(sys.argv[2]))
