"""The instructor's view of the class, as data: one :meth:`Board.read`, then :func:`render`.

For each learner: whether their kernel is alive (its presence key lives:
:mod:`echoq.teaching.presence`), when they last did something, the lesson they are in, the
lessons they reached and every exercise check (submissions, passed, the misconceptions hit;
"not started" for an exercise of a reached lesson with no submission), recorded by the kit on
the server (:mod:`echoq.teaching.progress`); the live counts of each of their queues;
their class-chaos worker and score. Learners are listed in one order everywhere (their
id, sorted). For the
class: the accesses the server's ACL refused (ACL LOG: who, which key or command), and the
class-chaos scoreboard.

Reads, per refresh: one MULTI with every learner's progress record, presence and every queue's
counts (ZCARD of pending, active, scheduled, dead and done): one consistent moment for the
whole class, in one round trip; then ACL LOG and the scoreboard
(:func:`classroom.read_scoreboard`).
The learners' queues are found with SCAN, at most every ``rediscover_s`` seconds.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import quote

import redis

from ...errors import EchoqError
from ...keyspace import Keyspace, check_queue_name
from .. import presence, progress
from . import acl, classroom
from .html import Markup, esc, join, keep_words
from .html import render as fill
from .hubinfo import HubView

__all__ = ["Board", "BoardData", "LearnerView", "Refusal", "Step", "render", "where_the_class_is"]

PLACES = ("pending", "active", "scheduled", "dead", "done")
# The most fields of one learner's progress record any reader takes in. The kit writes a few
# hundred at most; a record a learner grew past this costs only that learner's row.
MAX_RECORD_FIELDS = 5_000


def ask_record(pipe: redis.client.Pipeline, learner: str) -> None:
    """Queue the read of ``learner``'s progress record, at most ``MAX_RECORD_FIELDS`` of it
    (HSCAN: a record the learner swelled is not read whole; see :func:`record_of`)."""
    pipe.hscan(progress.key(learner), 0, count=MAX_RECORD_FIELDS)


def record_of(reply: object, learner: str) -> progress.Progress:
    """The record from :func:`ask_record`'s reply: a record too large to read in one go, of
    the wrong type, or unreadable is that learner's skipped record, never the reader's end."""
    try:
        cursor, fields = reply  # type: ignore[misc]
        if int(cursor) != 0:
            return progress.Progress(learner, skipped=1)
        return progress.parse(fields, learner)
    except (TypeError, ValueError):  # an error reply (WRONGTYPE), or not a pair
        return progress.Progress(learner, skipped=1)


@dataclass
class Refusal:
    """One ACL LOG entry: ``user`` was refused ``object`` (a key, a command or a channel)."""

    user: str
    reason: str  # key / command / channel / auth
    object: str
    context: str  # toplevel / lua / multi
    count: int
    age_s: float


@dataclass
class LearnerView:
    learner: str
    lessons: list[str]
    checks: list[progress.CheckRecord]
    queues: dict[str, dict[str, int]]  # queue name (without the namespace) -> counts
    score: classroom.Score
    record: progress.Progress | None = None
    alive: presence.Alive | None = None  # None: no live presence key (no kernel, or one that died)
    server: str | None = None  # the learner's Jupyter server, as the hub says (None: no hub to ask)
    worker_until_ms: int | None = None  # the latest deadline a class worker of theirs gave in its pulse (server ms)
    now_ms: int = 0  # the server's time of the reading
    name: str = ""  # the name the roster gave (the instructor's word for them)
    hub_user: str = ""  # their JupyterHub user name
    logged_in: bool | None = None  # whether the hub has seen them log in (None: no hub to ask)
    link: str | None = None  # their server, through the hub (an instructor may open it)

    @property
    def shown(self) -> str:
        return self.name or self.learner

    @property
    def kernel(self) -> str:
        """``alive``, ``gone`` (it reached the class server once; no presence key now) or
        ``never connected``."""
        if self.alive is not None:
            return "alive"
        return "gone" if self.record is not None and self.record.connected_ms else "never connected"

    @property
    def worker(self) -> str:
        """The class-chaos worker's state; a "running" one that pulses no more (its kernel
        died, even while another kernel of theirs lives) is ``gone``."""
        if self.score.worker == "running" and (self.worker_until_ms or 0) <= self.now_ms:
            return "gone"
        return self.score.worker


@dataclass
class BoardData:
    now_ms: int
    learners: list[LearnerView]
    refusals: list[Refusal]
    scoreboard: classroom.Scoreboard
    read_ms: float = 0.0
    queues_found: int = 0
    extra: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # where -> learner-written entries not shown (bad)
    strangers: list[str] = field(default_factory=list)  # hub users with a server, not on the roster


class Board:
    """Reads the whole class from the server with the instructor's client."""

    def __init__(
        self,
        client: redis.Redis,
        learners: Iterable[str],
        *,
        class_name: str = "class",
        rediscover_s: float = 5.0,
        refusals_shown: int = 20,
        hub_users: dict[str, str] | None = None,
        hub: HubView | None = None,
        names: dict[str, str] | None = None,
    ) -> None:
        self.hub_users = dict(hub_users or {})  # learner id -> their hub user name
        self.names = dict(names or {})  # learner id -> the name the roster gave
        self.hub = hub if hub is not None and hub.available else None
        self.client = client
        self.learners = sorted(set(learners))  # one order everywhere: the learner's id
        self.class_name = class_name
        self.rediscover_s = rediscover_s
        self.refusals_shown = refusals_shown
        self._queues: dict[str, list[str]] = {}
        self._found_at = float("-inf")
        self._bad_names = 0

    def discover(self) -> dict[str, list[str]]:
        """Every queue of every learner that has one (its stats hash exists), by SCAN."""
        wanted = set(self.learners)
        found: dict[str, set[str]] = {name: set() for name in self.learners}
        self._bad_names = 0
        for key in self.client.scan_iter(match="emq:{*.*}:stats", count=2000, _type="HASH"):
            queue = str(key)[len("emq:{") : -len("}:stats")]
            namespace = queue.partition(".")[0]
            if namespace in wanted:
                try:  # a learner may make a key whose name no kit queue has
                    found[namespace].add(check_queue_name(queue))
                except EchoqError:
                    self._bad_names += 1
        self._queues = {name: sorted(queues) for name, queues in found.items()}
        self._found_at = time.monotonic()
        return self._queues

    def read(self) -> BoardData:
        started = time.perf_counter()
        if time.monotonic() - self._found_at >= self.rediscover_s:
            self.discover()
        pipe = self.client.pipeline(transaction=True)
        pipe.time()
        for name in self.learners:
            ask_record(pipe, name)
        for name in self.learners:
            pipe.get(presence.alive_key(name))
        for name in self.learners:  # the latest deadline only: one member, whatever the set holds
            pipe.zrange(classroom.worker_pulse_key(name), -1, -1, withscores=True)
        order: list[tuple[str, str]] = []
        for name in self.learners:
            for queue in self._queues.get(name, []):
                keys = Keyspace(queue)
                for place in PLACES:
                    pipe.zcard(getattr(keys, place))
                order.append((name, queue))
        # A learner's keys hold whatever the learner wrote: a key of another type answers
        # WRONGTYPE inside the MULTI, and is skipped (and counted), not the whole read's end.
        reply = pipe.execute(raise_on_error=False)
        seconds, micros = reply[0]
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        skipped: Counter[str] = Counter({"queue names": self._bad_names})
        records = {}
        for name, raw in zip(self.learners, reply[1:], strict=False):
            records[name] = record_of(raw, name)
            skipped["progress records"] += records[name].skipped
        n = len(self.learners)
        pulses = {}
        for name, raw in zip(self.learners, reply[1 + n : 1 + 2 * n], strict=True):
            pulses[name] = None if isinstance(raw, Exception) else presence.parse(raw)
        until: dict[str, int | None] = {}
        for name, raw in zip(self.learners, reply[1 + 2 * n : 1 + 3 * n], strict=True):
            try:  # a learner's key: anything may be there
                until[name] = int(float(raw[0][1])) if raw and not isinstance(raw, Exception) else None
            except (TypeError, ValueError, IndexError, OverflowError):
                until[name], skipped["worker pulses"] = None, skipped["worker pulses"] + 1
        base = 1 + 3 * n
        counts: dict[str, dict[str, dict[str, int]]] = {name: {} for name in self.learners}
        for n, (name, queue) in enumerate(order):
            values = reply[base + n * len(PLACES) : base + (n + 1) * len(PLACES)]
            if any(isinstance(v, Exception) for v in values):
                skipped["queues"] += 1
                continue
            counts[name][queue.partition(".")[2]] = dict(zip(PLACES, map(int, values), strict=True))
        refusals = self.refusals()
        board = classroom.read_scoreboard(self.client, self.learners, klass=self.class_name)
        learners = [
            LearnerView(
                name,
                sorted(records[name].lessons),
                list(records[name].checks.values()),
                counts[name],
                board.by_learner.get(name, classroom.Score()),
                records[name],
                pulses[name],
                worker_until_ms=until[name],
                now_ms=now_ms,
                name=self.names.get(name, ""),
                hub_user=self.hub_users.get(name, name),
            )
            for name in self.learners
        ]
        data = BoardData(now_ms, learners, refusals, board, queues_found=len(order), skipped=+skipped)
        self._ask_hub(data)
        data.read_ms = (time.perf_counter() - started) * 1000
        return data

    def _ask_hub(self, data: BoardData) -> None:
        users = self.hub.users() if self.hub is not None else None
        if users is None:
            return
        base = self.hub.base_url
        for lv in data.learners:
            user = users.get(lv.hub_user)
            lv.server = user.server if user is not None else "stopped"
            lv.logged_in = user is not None and user.logged_in
            lv.link = f"{base}user/{quote(lv.hub_user, safe='')}/lab"
        ours = {self.hub_users.get(name, name) for name in self.learners}
        data.strangers = sorted(name for name, u in users.items() if name not in ours and u.server == "running")
        if self.hub.error:
            data.extra["hub"] = self.hub.error

    def refusals(self) -> list[Refusal]:
        """The latest ACL refusals of this class's users (learners and instructor)."""
        ours = set(self.learners) | {acl.INSTRUCTOR_USER}
        found = []
        for entry in self.client.acl_log(count=max(self.refusals_shown * 4, 50)):
            if entry.get("username") in ours:
                found.append(
                    Refusal(
                        str(entry.get("username")),
                        str(entry.get("reason")),
                        str(entry.get("object")),
                        str(entry.get("context")),
                        int(entry.get("count", 1)),
                        float(entry.get("age-seconds", 0)),
                    )
                )
        return found[: self.refusals_shown]


# -- rendering: every value through html.render, which escapes it -----------------------------

_STYLE = Markup("""<style>
.echoq-board table{border-collapse:collapse;font:13px/1.35 system-ui,sans-serif;margin:4px 0 12px}
.echoq-board th,.echoq-board td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
.echoq-board th{background:#f3f3f3;white-space:nowrap}.echoq-board .w{white-space:nowrap}
.echoq-board .num{text-align:right;font-variant-numeric:tabular-nums}
.echoq-board .bad{color:#b00020;font-weight:600}.echoq-board .ok{color:#16794c}
.echoq-board .muted{color:#666}.echoq-board .gone{color:#b00020}.echoq-board .id{color:#666;font-size:11px}
.echoq-board .why{color:#555;font-size:12px;max-width:36em}
.echoq-board .killed{color:#b00020}.echoq-board .running{color:#16794c}.echoq-board code{font-size:12px}
.echoq-board h3{margin:10px 0 2px;font:600 15px system-ui,sans-serif}.echoq-board p{margin:2px 0 6px}
</style>""")
_WORKER_CLASSES = {"running", "killed", "gone"}  # a worker state a learner wrote becomes a CSS class only if known
_NONE = Markup("-")


def _check(record: progress.CheckRecord) -> Markup:
    css = "ok" if record.passed else "muted" if record.submissions == 0 else "bad"
    return fill(
        "$lesson $exercise: <span class='$css'>$status</span>",
        lesson=record.lesson,
        exercise=record.exercise,
        css=css,
        status=record.status,
    )


def exercises_of(lessons: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """The course's exercises (lesson, exercise) in ``lessons`` (default: all), in course order."""
    try:
        from ..exercises import EXERCISES
    except ImportError:  # a kit without exercises: only checks seen on the server are shown
        return []
    wanted = None if lessons is None else set(lessons)
    return sorted((ex.lesson, key) for key, ex in EXERCISES.items() if wanted is None or ex.lesson in wanted)


def checks_with_not_started(lv: LearnerView) -> list[progress.CheckRecord]:
    """Every check the learner ran, plus "not started" for each exercise of a lesson they
    reached that has no submission (an untouched stub records none)."""
    seen = {(c.lesson, c.exercise): c for c in lv.checks}
    for lesson, exercise in exercises_of(lv.lessons):
        seen.setdefault((lesson, exercise), progress.CheckRecord(lesson, exercise, 0, False, None, 0))
    return [seen[k] for k in sorted(seen)]


def ago(now_ms: int, then_ms: int) -> str:
    """``then_ms`` as this machine's local clock time and in words, relative to ``now_ms``
    (both server ms): "14:02:03, 12 s ago" (the zone is said once, in the board's header),
    "-" for never."""
    if not then_ms:
        return "-"
    seconds = max(0, (now_ms - then_ms) // 1000)
    if seconds < 120:
        words = f"{seconds} s ago"
    elif seconds < 7200:
        words = f"{seconds // 60} min ago"
    else:
        words = f"{seconds // 3600} h ago"
    return f"{local_time(then_ms)}, {words}"


def _kernel(lv: LearnerView) -> Markup:
    if lv.kernel == "alive":
        return Markup("<span class='ok'>alive</span>")
    if lv.kernel == "gone":
        return Markup("<span class='bad'>not alive</span> (its presence key expired)")
    return Markup("<span class='muted'>none yet</span>")


def explain(exercise: str, misconception: str) -> str | None:
    """A misconception in one line for the instructor: its title and the first hint the
    check gives a learner (None when the course does not know it)."""
    try:
        from ..exercises import EXERCISES, GENERIC
    except ImportError:
        return None
    ex = EXERCISES.get(exercise)
    known = [*(ex.misconceptions if ex is not None else []), *GENERIC.values()]
    found = next((m for m in known if m.name == misconception), None)
    return f"{found.title}: {found.hint}" if found is not None else None


def stuck_on(lv: LearnerView) -> progress.CheckRecord | None:
    """The exercise the learner is stuck on: their latest check, when it has not passed."""
    tried = [c for c in lv.checks if c.submissions]
    latest = max(tried, key=lambda c: (c.at_ms, c.lesson, c.exercise), default=None)
    return latest if latest is not None and not latest.passed else None


def doing(lv: LearnerView) -> str:
    """Where the learner is, in words true of a person: ``never logged in``, ``logged in, no
    lesson yet``, ``in lesson 02``, ``stuck on exercise 02 claim``, ``passed every exercise``
    (without a hub: ``not seen yet`` until their kernel reaches the class server)."""
    record = lv.record or progress.Progress(lv.learner)
    if lv.logged_in is False:
        return "never logged in"
    if not record.lessons and not lv.checks:
        if lv.logged_in:
            return "logged in, no lesson yet"
        return "connected, no lesson yet" if record.connected_ms else "not seen yet"
    stuck = stuck_on(lv)
    if stuck is not None:
        return f"stuck on exercise {stuck.lesson} {stuck.exercise}"
    course = exercises_of()
    passed = {(c.lesson, c.exercise) for c in lv.checks if c.passed}
    if course and all(step in passed for step in course):
        return "passed every exercise"
    lesson = record.current or max([*record.lessons, *(c.lesson for c in lv.checks)])
    return f"in lesson {lesson}"


def _doing(lv: LearnerView) -> Markup:
    words = doing(lv)
    stuck = stuck_on(lv)
    if stuck is None:
        css = "ok" if words.startswith("passed") else "muted" if words in _NOT_YET else ""
        return fill("<span class='$css'>$words</span>", css=css, words=words)
    why = explain(stuck.exercise, stuck.misconception) if stuck.misconception else None
    return fill(
        "<span class='bad'>$words</span>$miss$why",
        words=words,
        miss=fill(" (<code>$m</code>)", m=stuck.misconception) if stuck.misconception else Markup(""),
        why=fill("<div class='why'>$why</div>", why=why) if why else Markup(""),
    )


_NOT_YET = {"never logged in", "not seen yet", "logged in, no lesson yet", "connected, no lesson yet"}


def _who(lv: LearnerView) -> Markup:
    """The learner's name, their id small beside it, and a link to their server (hub only)."""
    link = (
        fill(" <a href='$href' target='_blank' rel='noopener' title='open their JupyterLab (instructors may)'>open</a>",
             href=lv.link)
        if lv.link
        else Markup("")
    )  # fmt: skip
    return fill("<b>$name</b> <span class='id'>$id</span>$link", name=lv.shown, id=lv.learner, link=link)


def _queues(queues: dict[str, dict[str, int]]) -> Markup:
    shown = []
    for name, counts in sorted(queues.items()):
        parts = [f"{counts[p]} {p}" for p in PLACES if counts.get(p)]
        shown.append(fill("<code>$name</code> $counts", name=name, counts=", ".join(parts) if parts else "empty"))
    return join("<br>", shown) if shown else _NONE


def _strangers(data: BoardData) -> Markup:
    notes = []
    if data.strangers:
        notes.append(
            fill(
                "<p class='bad'>Hub users with a running server who are not on the roster (they work alone, "
                "unseen): $who. Add them to the roster, run <code>workshop up</code> again and restart their "
                "server.</p>",
                who=", ".join(data.strangers),
            )
        )
    if "hub" in data.extra:
        notes.append(fill("<p class='bad'>The hub did not answer: $why</p>", why=data.extra["hub"]))
    return join("", notes)


def _worker(state: str) -> str:
    return "gone (its kernel is not alive)" if state == "gone" else state


@dataclass
class Step:
    """One row of "where the class is": a lesson, or one exercise of a lesson."""

    lesson: str
    exercise: str | None
    reached: int  # learners who started the lesson / ran the check at least once
    passed: int = 0  # (exercises) learners whose check passed
    stuck: list[str] = field(default_factory=list)  # tried, not passed yet
    misconception: str | None = None  # the one most of the stuck learners hit last
    not_started: list[str] = field(default_factory=list)  # reached the lesson, no submission yet


def where_the_class_is(data: BoardData) -> list[Step]:
    """Per lesson and per exercise: how many got there, how many passed, who is stuck on what."""
    steps: dict[tuple[str, str | None], Step] = {}
    for lv in data.learners:
        for lesson in lv.lessons:
            steps.setdefault((lesson, None), Step(lesson, None, 0)).reached += 1
        for check in lv.checks:
            step = steps.setdefault((check.lesson, check.exercise), Step(check.lesson, check.exercise, 0))
            step.reached += 1
            if check.passed:
                step.passed += 1
            else:
                step.stuck.append(lv.shown)
        tried = {(c.lesson, c.exercise) for c in lv.checks}
        for lesson, exercise in exercises_of(lv.lessons):
            if (lesson, exercise) not in tried:
                steps.setdefault((lesson, exercise), Step(lesson, exercise, 0)).not_started.append(lv.shown)
    for (lesson, exercise), step in steps.items():
        if exercise is not None:
            hits = [
                c.misconception
                for lv in data.learners
                for c in lv.checks
                if (c.lesson, c.exercise) == (lesson, exercise) and not c.passed and c.misconception
            ]
            step.misconception = max(set(hits), key=hits.count) if hits else None
    return [steps[k] for k in sorted(steps, key=lambda k: (k[0], k[1] or ""))]


def _glance(data: BoardData) -> Markup:
    rows = []
    for step in where_the_class_is(data):
        if step.exercise is None:
            rows.append(
                fill(
                    "<tr><td>lesson $lesson</td><td class='num'>$n</td><td></td><td></td><td></td></tr>",
                    lesson=step.lesson,
                    n=step.reached,
                )
            )
            continue
        stuck = join(", ", step.stuck[:8]) + (" ..." if len(step.stuck) > 8 else "")
        waiting = join(", ", step.not_started[:8]) + (" ..." if len(step.not_started) > 8 else "")
        why = explain(step.exercise, step.misconception) if step.misconception else None
        miss = (
            fill(
                "; most hit <code>$m</code>$why",
                m=step.misconception,
                why=fill("<div class='why'>$why</div>", why=why) if why else Markup(""),
            )
            if step.misconception
            else ""
        )
        rows.append(
            fill(
                "<tr><td>&nbsp;&nbsp;exercise $exercise</td><td class='num'>$reached</td>"
                "<td class='num'>$passed</td><td>$stuck$miss</td><td>$waiting</td></tr>",
                exercise=step.exercise,
                reached=step.reached,
                passed=step.passed,
                stuck=Markup(stuck) if step.stuck else _NONE,
                miss=Markup(miss),
                waiting=Markup(waiting) if step.not_started else _NONE,
            )
        )
    heads = ["step", "reached", "passed", "stuck (tried, not passed)", "not started (in the lesson, no submission)"]
    return _table(heads, rows, "No learner has started a lesson yet.")


def _table(heads: list[str], rows: list[Markup], empty: str) -> Markup:
    """A table of ``rows`` under ``heads`` (the page's own words), or ``empty`` as a line."""
    if not rows:
        return fill("<p>$empty</p>", empty=empty)
    return Markup("<table><tr>" + "".join(f"<th>{head}</th>" for head in heads) + "</tr>" + join("", rows) + "</table>")


def _bad(n: int) -> str:
    return "num bad" if n else "num"


def _score_row(cell: str, name: str, s: classroom.Score, total: bool = False, worker: str | None = None) -> Markup:
    shown = s.worker if worker is None else worker
    state = shown if total else shown if shown in _WORKER_CLASSES else ""
    return fill(
        f"<tr><{cell}>$name</{cell}><{cell} class='$state_class'>$state</{cell}>"
        f"<{cell} class='num'>$delivered</{cell}><{cell} class='num'>$redelivered</{cell}>"
        f"<{cell} class='num'>$effects</{cell}><{cell} class='$dup_class'>$duplicates</{cell}>"
        f"<{cell} class='$lost_class'>$lost</{cell}></tr>",
        name=name,
        state_class="" if total else state,
        state=shown if total else _worker(shown),
        delivered=s.delivered,
        redelivered=s.redelivered,
        effects=s.effects,
        duplicates=s.duplicates,
        dup_class=_bad(s.duplicates) if not total else ("num bad" if s.duplicates else "num ok"),
        lost=s.lost,
        lost_class=_bad(s.lost) if not total else ("num bad" if s.lost else "num ok"),
    )


def _forged(sb: classroom.Scoreboard) -> Markup:
    if not sb.forged:
        return Markup("")
    return fill(
        "<p class='bad'>Written by hand, not by the kit's moves (a learner may write the shared class queue): "
        "$what. Not counted as what they claim; the lost jobs among them are counted lost.</p>",
        what=", ".join(f"{n} {what}" for what, n in sorted(sb.forged.items())),
    )


def _disagreement(who: str, what: str) -> Markup:
    """One learner's own ledger against the class queue, in one line (see classroom)."""
    line = Markup(esc(what, longest=600))
    if who == "?":
        return fill("<p class='bad'>The queue disagrees with every learner's ledger: $what.</p>", what=line)
    return fill("<p class='bad'>$who's ledger disagrees with the queue: $what.</p>", who=who, what=line)


def _learners(data: BoardData) -> Markup:
    with_server = any(x.server is not None for x in data.learners)
    rows = []
    for lv in data.learners:
        checks = checks_with_not_started(lv)
        record = lv.record or progress.Progress(lv.learner)
        rows.append(
            fill(
                "<tr><td>$who</td><td>$doing</td><td>$ago</td>$server<td>$kernel</td><td>$lessons</td>"
                "<td>$checks</td><td>$queues</td></tr>",
                who=_who(lv),
                doing=_doing(lv),
                server=fill("<td>$s</td>", s=lv.server) if with_server else Markup(""),
                kernel=_kernel(lv),
                ago=ago(data.now_ms, record.last_activity_ms),
                lessons=join(", ", lv.lessons) if lv.lessons else _NONE,
                checks=join("<br>", [_check(c) for c in checks]) if checks else _NONE,
                queues=_queues(lv.queues),
            )
        )
    return fill(
        "<table class='learners'><tr><th>learner</th><th>now</th><th>last activity</th>$server_head<th>kernel</th>"
        "<th>lessons reached</th><th>exercise checks</th><th>queues, live</th></tr>$rows</table>",
        server_head=Markup("<th>server</th>" if with_server else ""),
        rows=join("", rows),
    )


def _named(data: BoardData, learner: str) -> Markup:
    """A learner of the roster by the roster's name, their id small beside it (anyone else: as named)."""
    lv = next((lv for lv in data.learners if lv.learner == learner), None)
    if lv is None or not lv.name or lv.name == learner:
        return esc(learner)
    return fill("$name <span class='id'>$id</span>", name=lv.name, id=learner)


def _refusals(data: BoardData) -> Markup:
    refused = [
        fill(
            "<tr><td>$user</td><td>$reason</td><td><code>$object</code></td><td>$context</td>"
            "<td class='num'>$count</td><td class='num'>$age</td></tr>",
            user=_named(data, r.user),
            reason=r.reason,
            object=r.object,
            context=r.context,
            count=r.count,
            age=ago(data.now_ms, data.now_ms - round(r.age_s * 1000)),
        )
        for r in data.refusals
    ]
    return _table(["who", "refused", "key or command", "where", "times", "last"], refused, "No access refused so far.")


def render_chaos(data: BoardData) -> Markup:
    """Class chaos: the scoreboard, the verdict and what was written by hand."""
    sb = data.scoreboard
    workers = {name: s.worker for name, s in sb.by_learner.items()} | {lv.learner: lv.worker for lv in data.learners}
    running = sum(w == "running" for w in workers.values())
    verdict = Markup(
        '<span class="ok">no job lost, no effect duplicated</span>'
        if sb.ok
        else '<span class="bad">a job was lost or an effect duplicated</span>'
        if not (sb.forged or sb.disagreements)
        else '<span class="bad">the class queue was written by hand (below): its figures are not the workers\' doing'
        "</span>"
    )
    forged = join("", [_forged(sb), *(_disagreement(who, sb.disagreement(who)) for who in sorted(sb.disagreements))])
    by_learner = sorted(sb.by_learner.items())
    body = fill(
        "<p>Class queue <code>emq:{$queue}</code>: $jobs jobs produced, $completed completed, $waiting. $verdict.</p>"
        "<table><tr><th>learner</th><th>worker</th><th>delivered</th><th>redelivered</th><th>effects</th>"
        "<th>duplicate effects</th><th>lost</th></tr>$rows$total</table>$forged",
        forged=forged,
        queue=sb.queue,
        jobs=sb.jobs,
        completed=sb.completed,
        waiting=", ".join(f"{sb.counts.get(p, 0)} {p}" for p in PLACES[:4]),
        verdict=verdict,
        rows=join("", [_score_row("td", _named(data, n), one, worker=workers[n]) for n, one in by_learner]),
        total=_score_row("th", "class", sb.total, total=True, worker=f"{running} running"),
    )
    return Markup(_STYLE + "<div class='echoq-board'>" + keep_words(body) + "</div>")


def local_time(ms: int) -> str:
    """``ms`` (epoch ms) as this machine's local clock time, "14:02:03"."""
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


def time_zone() -> str:
    """The local time zone's name and offset, "CET, UTC+01:00": said wherever a time is shown."""
    offset = time.strftime("%z")
    return f"{time.strftime('%Z')}, UTC{offset[:3]}:{offset[3:]}"


def render(data: BoardData, *, chaos: bool = True) -> Markup:
    """The board as one HTML fragment: every number comes from ``data``, every text is
    escaped. First where the class is and who is stuck, then the learners, the hub users
    not on the roster and the ACL's refusals; class chaos last (``chaos=False``: left out,
    for a page that shows it folded, :func:`render_chaos`)."""
    skipped = dict(Counter(data.skipped) + Counter(data.scoreboard.skipped))
    bad = (
        fill(
            "<p class='bad'>$n bad entries skipped (learner-written fields that are not what the kit writes): "
            "$where.</p>",
            n=sum(skipped.values()),
            where=", ".join(f"{n} in {where}" for where, n in sorted(skipped.items())),
        )
        if skipped
        else ""
    )
    body = fill(
        "<p>$learners learners, $queues queues; read at $stamp (local time: $zone) in $ms ms.</p>$bad"
        "<h3>Where the class is</h3>$glance<h3>Learners</h3>$table$strangers"
        "<h3>Refused by the ACL</h3>$refusals",
        learners=len(data.learners),
        queues=data.queues_found,
        stamp=local_time(data.now_ms),
        zone=time_zone(),
        ms=f"{data.read_ms:.0f}",
        bad=Markup(bad),
        glance=_glance(data),
        table=_learners(data),
        refusals=_refusals(data),
        strangers=_strangers(data),
    )
    page = Markup(_STYLE + "<div class='echoq-board'>" + keep_words(body) + "</div>")
    if chaos:
        page = Markup(page + "<h3>Class chaos</h3>" + render_chaos(data))
    return page
