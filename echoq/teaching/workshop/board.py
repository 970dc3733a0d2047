"""The instructor's view of the class, as data: one :meth:`Board.read`, then :func:`render`.

For each learner: whether their kernel is alive (its heartbeat key lives:
:mod:`echoq.teaching.heartbeat`), when they last did something, the lesson they are in, the
lessons they reached and every exercise check (attempts, passed, the misconceptions hit;
"not started" for an exercise of a reached lesson with no attempt), recorded by the kit on
the server (:mod:`echoq.teaching.progress`); the live counts of each of their queues;
their class-chaos worker and score. Learners are listed in one order everywhere (their
id, sorted). For the
class: the accesses the server's ACL refused (ACL LOG: who, which key or command), and the
class-chaos scoreboard.

Reads, per refresh: one MULTI with every learner's progress record, heartbeat and every queue's
counts (ZCARD of pending, active, scheduled, dead and done): one consistent moment for the
whole class, in one round trip; then ACL LOG and the scoreboard
(:func:`classroom.read_scoreboard`).
The learners' queues are found with SCAN, at most every ``rediscover_s`` seconds.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis

from ...keyspace import Keyspace
from .. import heartbeat, progress
from . import acl, classroom
from .hubinfo import HubView

__all__ = ["Board", "BoardData", "LearnerView", "Refusal", "Step", "render", "where_the_class_is"]

PLACES = ("pending", "active", "scheduled", "dead", "done")


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
    alive: heartbeat.Alive | None = None  # None: no live heartbeat (no kernel, or one that died)
    server: str | None = None  # the learner's Jupyter server, as the hub says (None: no hub to ask)

    @property
    def kernel(self) -> str:
        """``alive``, ``gone`` (it reached the class server once; no heartbeat now) or
        ``never connected``."""
        if self.alive is not None:
            return "alive"
        return "gone" if self.record is not None and self.record.connected_ms else "never connected"

    @property
    def worker(self) -> str:
        """The class-chaos worker's state; a "running" one whose kernel died is ``gone``."""
        if self.score.worker == "running" and self.alive is None:
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
    ) -> None:
        self.hub_users = dict(hub_users or {})  # learner id -> their hub user name
        self.hub = hub if hub is not None and hub.available else None
        self.client = client
        self.learners = sorted(set(learners))  # one order everywhere: the learner's id
        self.class_name = class_name
        self.rediscover_s = rediscover_s
        self.refusals_shown = refusals_shown
        self._queues: dict[str, list[str]] = {}
        self._found_at = float("-inf")

    def discover(self) -> dict[str, list[str]]:
        """Every queue of every learner that has one (its stats hash exists), by SCAN."""
        wanted = set(self.learners)
        found: dict[str, set[str]] = {name: set() for name in self.learners}
        for key in self.client.scan_iter(match="emq:{*.*}:stats", count=2000, _type="HASH"):
            queue = str(key)[len("emq:{") : -len("}:stats")]
            namespace = queue.partition(".")[0]
            if namespace in wanted:
                found[namespace].add(queue)
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
            pipe.hgetall(progress.key(name))
        for name in self.learners:
            pipe.get(heartbeat.alive_key(name))
        order: list[tuple[str, str]] = []
        for name in self.learners:
            for queue in self._queues.get(name, []):
                keys = Keyspace(queue)
                for place in PLACES:
                    pipe.zcard(getattr(keys, place))
                order.append((name, queue))
        reply = pipe.execute()
        seconds, micros = reply[0]
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        records = {name: progress.parse(raw, name) for name, raw in zip(self.learners, reply[1:], strict=False)}
        n = len(self.learners)
        beats = {name: heartbeat.parse(raw) for name, raw in zip(self.learners, reply[1 + n : 1 + 2 * n], strict=True)}
        base = 1 + 2 * n
        counts: dict[str, dict[str, dict[str, int]]] = {name: {} for name in self.learners}
        for n, (name, queue) in enumerate(order):
            values = reply[base + n * len(PLACES) : base + (n + 1) * len(PLACES)]
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
                beats[name],
            )
            for name in self.learners
        ]
        data = BoardData(now_ms, learners, refusals, board, queues_found=len(order))
        self._ask_hub(data)
        data.read_ms = (time.perf_counter() - started) * 1000
        return data

    def _ask_hub(self, data: BoardData) -> None:
        users = self.hub.users() if self.hub is not None else None
        if users is None:
            return
        for lv in data.learners:
            user = users.get(self.hub_users.get(lv.learner, lv.learner))
            lv.server = user.server if user is not None else "never logged in"
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


# -- rendering ---------------------------------------------------------------------------------

_STYLE = """<style>
.echoq-board table{border-collapse:collapse;font:13px/1.35 system-ui,sans-serif;margin:4px 0 12px}
.echoq-board th,.echoq-board td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
.echoq-board th{background:#f3f3f3}.echoq-board .num{text-align:right;font-variant-numeric:tabular-nums}
.echoq-board .bad{color:#b00020;font-weight:600}.echoq-board .ok{color:#16794c}
.echoq-board .muted{color:#666}.echoq-board .gone{color:#b00020}
.echoq-board .killed{color:#b00020}.echoq-board .running{color:#16794c}.echoq-board code{font-size:12px}
</style>"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _check(record: progress.CheckRecord) -> str:
    css = "ok" if record.passed else "muted" if record.attempts == 0 else "bad"
    return f"{_e(record.lesson)} {_e(record.exercise)}: <span class='{css}'>{_e(record.status)}</span>"


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
    reached that has no attempt (an untouched stub records none)."""
    seen = {(c.lesson, c.exercise): c for c in lv.checks}
    for lesson, exercise in exercises_of(lv.lessons):
        seen.setdefault((lesson, exercise), progress.CheckRecord(lesson, exercise, 0, False, None, 0))
    return [seen[k] for k in sorted(seen)]


def ago(now_ms: int, then_ms: int) -> str:
    """``then_ms`` in words, relative to ``now_ms`` (both server ms): "12 s ago", "-" for never."""
    if not then_ms:
        return "-"
    seconds = max(0, (now_ms - then_ms) // 1000)
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def _kernel(lv: LearnerView, now_ms: int) -> str:
    if lv.kernel == "alive":
        return "<span class='ok'>alive</span>"
    if lv.kernel == "gone":
        return "<span class='bad'>not alive</span> (no heartbeat)"
    if lv.server == "running":
        return "<span class='bad'>none on the class server</span> (server running: working alone?)"
    return "<span class='bad'>never connected</span>"


def _queues(queues: dict[str, dict[str, int]]) -> str:
    shown = []
    for name, counts in sorted(queues.items()):
        parts = [f"{counts[p]} {p}" for p in PLACES if counts.get(p)]
        shown.append(f"<code>{_e(name)}</code> {', '.join(parts) if parts else 'empty'}")
    return "<br>".join(shown) or "-"


def _strangers(data: BoardData) -> str:
    notes = ""
    if data.strangers:
        notes += (
            "<p class='bad'>Hub users with a running server who are not on the roster (they work alone, unseen): "
            + ", ".join(map(_e, data.strangers))
            + ". Add them to the roster, run <code>workshop up</code> again and restart their server.</p>"
        )
    if "hub" in data.extra:
        notes += f"<p class='bad'>The hub did not answer: {_e(data.extra['hub'])}</p>"
    return notes


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
    not_started: list[str] = field(default_factory=list)  # reached the lesson, no attempt yet
    misconception: str | None = None  # the one most of the stuck learners hit last


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
                step.stuck.append(lv.learner)
        tried = {(c.lesson, c.exercise) for c in lv.checks}
        for lesson, exercise in exercises_of(lv.lessons):
            if (lesson, exercise) not in tried:
                steps.setdefault((lesson, exercise), Step(lesson, exercise, 0)).not_started.append(lv.learner)
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


def _glance(data: BoardData) -> str:
    rows = []
    for step in where_the_class_is(data):
        if step.exercise is None:
            rows.append(
                f"<tr><td>lesson {_e(step.lesson)}</td><td class='num'>{step.reached}</td><td></td><td></td>"
                f"<td></td></tr>"
            )
            continue
        waiting = ", ".join(map(_e, step.not_started[:8])) + (" ..." if len(step.not_started) > 8 else "")
        stuck = ", ".join(map(_e, step.stuck[:8])) + (" ..." if len(step.stuck) > 8 else "")
        miss = f"; most hit <code>{_e(step.misconception)}</code>" if step.misconception else ""
        rows.append(
            f"<tr><td>&nbsp;&nbsp;exercise {_e(step.exercise)}</td><td class='num'>{step.reached}</td>"
            f"<td class='num'>{step.passed}</td><td>{stuck or '-'}{miss}</td><td>{waiting or '-'}</td></tr>"
        )
    if not rows:
        return "<p>No learner has started a lesson yet.</p>"
    return (
        "<table><tr><th>step</th><th>reached</th><th>passed</th><th>stuck (tried, not passed)</th>"
        "<th>not started (in the lesson, no attempt)</th></tr>" + "".join(rows) + "</table>"
    )


def render(data: BoardData) -> str:
    """The board as one HTML fragment (every number comes from ``data``)."""
    sb = data.scoreboard
    rows = []
    for lv in data.learners:
        checks = "<br>".join(_check(c) for c in checks_with_not_started(lv)) or "-"
        lessons = ", ".join(map(_e, lv.lessons)) or "-"
        record = lv.record or progress.Progress(lv.learner)
        server = f"<td>{_e(lv.server)}</td>" if any(x.server is not None for x in data.learners) else ""
        rows.append(
            f"<tr><td><b>{_e(lv.learner)}</b></td>{server}<td>{_kernel(lv, data.now_ms)}</td>"
            f"<td>{_e(ago(data.now_ms, record.last_activity_ms))}</td><td>{_e(record.current or '-')}</td>"
            f"<td>{lessons}</td><td>{checks}</td><td>{_queues(lv.queues)}</td></tr>"
        )
    server_head = "<th>server</th>" if any(x.server is not None for x in data.learners) else ""
    learners = (
        f"<table><tr><th>learner</th>{server_head}<th>kernel</th><th>last activity</th><th>lesson now</th>"
        "<th>lessons reached</th><th>exercise checks</th><th>queues, live</th></tr>" + "".join(rows) + "</table>"
    )
    refused = "".join(
        f"<tr><td>{_e(r.user)}</td><td>{_e(r.reason)}</td><td><code>{_e(r.object)}</code></td>"
        f"<td>{_e(r.context)}</td><td class='num'>{r.count}</td><td class='num'>{r.age_s:.0f} s ago</td></tr>"
        for r in data.refusals
    )
    refusals = (
        "<table><tr><th>who</th><th>refused</th><th>key or command</th><th>where</th><th>times</th><th>last</th></tr>"
        + refused
        + "</table>"
        if refused
        else "<p>No access refused so far.</p>"
    )
    workers = {name: s.worker for name, s in sb.by_learner.items()} | {lv.learner: lv.worker for lv in data.learners}
    running = sum(w == "running" for w in workers.values())
    score_rows = "".join(
        f"<tr><td>{_e(name)}</td><td class='{_e(workers[name])}'>{_e(_worker(workers[name]))}</td>"
        f"<td class='num'>{s.delivered}</td>"
        f"<td class='num'>{s.redelivered}</td><td class='num'>{s.effects}</td>"
        f"<td class='num {'bad' if s.duplicates else ''}'>{s.duplicates}</td>"
        f"<td class='num {'bad' if s.lost else ''}'>{s.lost}</td></tr>"
        for name, s in sorted(sb.by_learner.items())
    )
    t = sb.total
    verdict = (
        '<span class="ok">no job lost, no effect duplicated</span>'
        if sb.ok
        else '<span class="bad">a job was lost or an effect duplicated</span>'
    )
    waiting = ", ".join(f"{sb.counts[p]} {p}" for p in PLACES[:4])
    scoreboard = (
        f"<p>Class queue <code>emq:{{{_e(sb.queue)}}}</code>: {sb.jobs} jobs produced, {sb.completed} completed, "
        f"{waiting}. {verdict}.</p>"
        "<table><tr><th>learner</th><th>worker</th><th>delivered</th><th>redelivered</th><th>effects</th>"
        "<th>duplicate effects</th><th>lost</th></tr>"
        + score_rows
        + f"<tr><th>class</th><th>{running} running</th><th class='num'>{t.delivered}</th>"
        f"<th class='num'>{t.redelivered}</th><th class='num'>{t.effects}</th>"
        f"<th class='num {'bad' if t.duplicates else 'ok'}'>{t.duplicates}</th>"
        f"<th class='num {'bad' if t.lost else 'ok'}'>{t.lost}</th></tr></table>"
    )
    stamp = time.strftime("%H:%M:%S", time.localtime(data.now_ms / 1000))
    return (
        f'{_STYLE}<div class="echoq-board">'
        f"<p>{len(data.learners)} learners, {data.queues_found} queues; read at {stamp} (server time) "
        f"in {data.read_ms:.0f} ms.</p>"
        f"<h3>Class chaos</h3>{scoreboard}"
        f"<h3>Where the class is</h3>{_glance(data)}"
        f"<h3>Learners</h3>{learners}"
        f"{_strangers(data)}"
        f"<h3>Refused by the ACL</h3>{refusals}</div>"
    )
