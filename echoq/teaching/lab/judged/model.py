"""What the picture of a rejected answer shows, as plain data: no widget and no matplotlib.

:func:`picture` turns a feedback's evidence (:mod:`echoq.teaching.exercises.evidence`) into a
:class:`Picture` -- the boards, what is lit on them, the learner's commands around the one
the board is at, the timeline -- and :class:`JudgedModel` holds which command that is. What
is lit is what the ✗ line names, taken from the judge's own record of it (the key, field or
member a difference is at; the jobs and row fields a scene's line was written with), never
guessed from the picture.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from traitlets import HasTraits, Int

from ....ids import JOB_ID_RE
from ...evidence import ROW_FIELDS, SETS, Event, Scene, Sides
from . import words

__all__ = ["Board", "Column", "JudgedModel", "Picture", "picture"]

WINDOW = 7  # command lines shown at once, around the one the board is at
COLUMNS = 8  # timeline columns: the last events before the ✗
LANES = 5
FIELDS = 8  # a row card's fields, at most
QUIET = ("enqueued_ms", "claimed_ms", "dead_ms", "arrival")  # bookkeeping: on a card only when the ✗ line names it
TIME_MS = 10**12  # a score at least this is a time on the server's clock


@dataclass(frozen=True)
class Board:
    """One queue on the picture: members of each set (id, lit), exact sizes, the row shown."""

    title: str
    sets: dict[str, tuple[tuple[str, str, bool], ...]]  # place -> (job id, second label line, lit)
    counts: dict[str, int]
    lit_places: frozenset[str] = frozenset()
    changed: frozenset[str] = frozenset()  # places the command the board is at wrote
    row_key: str = ""  # 'job:JOB…' whose fields the card shows
    row: tuple[tuple[str, str, bool], ...] | None = None  # (field, value, lit); None: no row
    row_lit: bool = False
    outside: tuple[tuple[str, str, bool], ...] = ()  # (key as shown, summary, lit): keys outside the sets


@dataclass(frozen=True)
class Column:
    """One moment on the timeline: its column, the actor's lane, its label and kind."""

    lane: int
    label: str
    kind: str


@dataclass(frozen=True)
class Picture:
    kind: str  # 'sides' or 'scene'
    heading: str
    subtitle: str
    boards: tuple[Board, ...]
    line: str  # the ✗ line
    commands_title: str = ""
    commands: tuple[tuple[str, str], ...] = ()  # (text, mark: 'at', 'diverged', 'at diverged', '')
    missing: str = ""  # the reference's command the learner's move lacks, where that is the difference
    lanes: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()
    lit: tuple[str, ...] = field(default=())  # what is lit, as the ✗ line writes it (for tests and alt text)

    @property
    def alt(self) -> str:
        return words.alt(self.heading, self.line)


def picture(feedback: Any, step: int | None = None) -> Picture:
    """The picture of ``feedback``'s rejected run; for a differential run, the learner's
    board after its first ``step`` commands (None: at the end, as the judge read it)."""
    ev = feedback.evidence
    line = feedback.failed[1] if feedback.failed else ""
    if isinstance(ev, Sides):
        return _sides(ev, line, step)
    if isinstance(ev, Scene):
        return _scene(ev, line)
    raise TypeError(f"no picture of {type(ev).__name__}")


def _field_order(fields: Any) -> list[str]:
    """A row's fields as a card lists them: the ones a picture shows first, then the rest
    but the bookkeeping, by name."""
    return [f for f in ROW_FIELDS if f in fields] + sorted(f for f in fields if f not in (*ROW_FIELDS, *QUIET))


# -- the differential judge's two runs -----------------------------------------------------------


def _sides(ev: Sides, line: str, step: int | None) -> Picture:
    steps = len(ev.mine_commands)
    at = steps if step is None else max(0, min(step, steps))
    mine = ev.mine if at == steps else ev.after(at)
    key, sub = ev.part()
    job = _job_of(ev, key, sub)
    lit: list[str] = []
    if "stray" in ev.where:
        lit.append(ev.where["stray"])
    elif key in SETS and sub:
        lit += [f"emq:{{q}}:{key}", sub]
    elif key.startswith("job:") and sub:
        lit += [f"emq:{{q}}:{key}", f"field {sub}"]
    elif key:
        lit.append(f"emq:{{q}}:{key}")
    changed: set[str] = set()
    if at and at <= steps and step is not None:
        changed = {ev.name_of(k) for k, _kind, _v in ev.mine_commands[at - 1].wrote}
    mine_diverged, theirs_diverged = ev.divergence()
    boards = (
        _board(ev.titles[0], mine, ev, key, sub, job, ev.now, changed, mine=True),
        _board(ev.titles[1], ev.theirs, ev, key, sub, job, ev.now, set(), mine=False),
    )
    first = max(0, min(at - WINDOW // 2, steps - WINDOW))
    commands = []
    for n, command in enumerate(ev.mine_commands[first : first + WINDOW], start=first):
        marks = []
        if n == at - 1:
            marks.append("at")
        if n == mine_diverged:
            marks.append("diverged")
        commands.append((words.command(n + 1, command.args, ev.name_of), " ".join(marks)))
    missing = ""
    if theirs_diverged is not None:
        theirs = ev.theirs_commands[theirs_diverged]
        missing = words.missing(words.command(theirs_diverged + 1, theirs.args, lambda k: ev.name_of(k, 1)))
    return Picture(
        "sides",
        words.SIDES,
        words.starting(words.ids(ev.state)),
        boards,
        line,
        words.commands_header(ev.titles[0], at, steps, ev.sent[0]),
        tuple(commands),
        missing,
        lit=tuple(lit),
    )


def _job_of(ev: Sides, key: str, sub: str | None) -> str:
    """The job whose row the cards show: the one the ✗ line names, else the caller's, else
    the first job of the state."""
    if key.startswith("job:"):
        return key[4:]
    if key in SETS and sub:
        return sub
    found = JOB_ID_RE.search(ev.where.get("stray", ""))
    if found:
        return found.group(0)
    if ev.caller:
        return ev.caller
    rows = sorted(name[4:] for name in ev.before if name.startswith("job:"))
    return rows[0] if rows else ""


def _board(
    title: str,
    keys: dict[str, tuple[str, Any, int]],
    ev: Sides,
    key: str,
    sub: str | None,
    job: str,
    now: int,
    changed: set[str],
    *,
    mine: bool,
) -> Board:
    sets, counts = {}, {}
    for place in SETS:
        kind, value, _ttl = keys.get(place, ("none", {}, -1))
        members = value if kind == "zset" and isinstance(value, dict) else {}
        counts[place] = len(members)
        sets[place] = tuple(
            (member, _score(score, now) if key == place and member == sub else "", key == place and member == sub)
            for member, score in members.items()
        )
    lit_places = frozenset({key} if key in SETS and not sub else ())
    row_key = f"job:{job}" if job else ""
    row = None
    if row_key in keys and keys[row_key][0] == "hash":
        fields = keys[row_key][1]
        names = _field_order(fields)
        if key == row_key and sub and sub not in names:
            names.insert(0, sub)  # the field the line names, missing on this side
        row = tuple((name, fields.get(name, "(none)"), key == row_key and name == sub) for name in names[:FIELDS])
    outside: list[tuple[str, str, bool]] = []
    if mine:
        for shown, (kind, value) in ev.strays.items():
            outside.append((shown, words.key_summary(kind, value), ev.where.get("stray") == shown))
    for name in sorted(keys):
        if name in SETS or name.startswith("job:"):
            continue
        kind, value, _ttl = keys[name]
        outside.append((f"emq:{{q}}:{name}", words.key_summary(kind, value), name == key))
    if "reply" in ev.where:
        got, want = ev.where["reply"]
        outside.append((words.reply(got if mine else want), "", True))
    return Board(
        title,
        sets,
        counts,
        lit_places,
        frozenset(c for c in changed if c in SETS),
        row_key,
        row,
        key == row_key and not sub,
        tuple(outside),
    )


def _score(score: Any, now: int) -> str:
    if isinstance(score, int | float) and score >= TIME_MS and now:
        offset = (score - now) / 1000
        return f"now{offset:+.1f}s" if abs(offset) < 100 else f"now{offset:+,.0f}s"
    return f"score {score:g}" if isinstance(score, int | float) else str(score)


# -- a scene's failure ------------------------------------------------------------------------------

_PLACE_WORD = re.compile(r"\b(pending|active|scheduled|dead|done)\b")


def _scene(ev: Scene, line: str) -> Picture:
    job = ev.jobs[0] if ev.jobs else ""
    sets = {}
    for place in SETS:
        kind, value, _ttl = ev.board.get(place, ("none", {}, -1))
        members = value if kind == "zset" else {}
        sets[place] = tuple((member, "", member in ev.jobs) for member in members)
    if not job:  # no job named: the row of a job the picture shows in two sets, if any
        seen: dict[str, int] = {}
        for members in sets.values():
            for member, _label, _lit in members:
                seen[member] = seen.get(member, 0) + 1
        job = next((m for m, n in seen.items() if n > 1), "")
    row_key = f"job:{job}" if job else ""
    row = None if job else ()  # no job named: no row to show (not a missing one)
    if row_key in ev.board:
        fields = ev.board[row_key][1]
        names = _field_order(fields)
        row = tuple((name, fields[name], name in ev.fields) for name in names[:FIELDS])
    # The sets the line names by name: those holding a job it names, or where it names no job,
    # those holding any.
    named = set(_PLACE_WORD.findall(line))
    holding = {place for place, members in sets.items() if any(lit for _m, _l, lit in members)}
    lit_places = frozenset(named & holding if ev.jobs else {p for p in named if ev.counts.get(p)})
    lit = [*ev.jobs, *(f"field {f}" for f in ev.fields), *sorted(lit_places)]
    board = Board("your run", sets, dict(ev.counts), lit_places, frozenset(), row_key, row)
    lanes, columns = _timeline(ev.watch.timeline(ev.queue) if ev.watch is not None else [])
    return Picture(
        "scene",
        words.SCENE,
        words.queue_line(ev.queue, ev.counts),
        (board,),
        line,
        lanes=lanes,
        columns=columns,
        lit=tuple(lit),
    )


def _timeline(events: list[Event]) -> tuple[tuple[str, ...], tuple[Column, ...]]:
    """The moments before the ✗ that fit in COLUMNS: runs of one actor's same step folded into
    one ('claims ×12'); where more happened, an actor's start and then its oldest plain steps
    give way first -- a kill, a freeze, a wake, a move of the check's never do, nor the step an
    actor made just before its kill or freeze. One lane per actor, in order of first appearance."""
    folded: list[list[Any]] = []  # [actor, label, kind, times]
    for event in events:
        label = words.event_label(event.what)
        if folded and folded[-1][0] == event.actor and folded[-1][1] == label:
            folded[-1][3] += 1
            continue
        folded.append([event.actor, label, event.kind, 1])

    def spare(n: int, kind: str) -> bool:
        actor, _label, was, _times = folded[n]
        later = [f for f in folded[n + 1 :] if f[0] == actor]
        if was != kind or (kind == "start" and not later):
            return False
        return not (kind == "step" and later and later[0][2] not in ("step", "start"))

    for kind in ("start", "step"):
        n = 0
        while len(folded) > COLUMNS and n < len(folded):
            if spare(n, kind):
                del folded[n]
            else:
                n += 1
    folded = folded[-COLUMNS:]
    lanes: list[str] = []
    for actor, *_rest in folded:
        if actor not in lanes:
            lanes.append(actor)
    lanes = lanes[-LANES:]
    columns = tuple(
        Column(lanes.index(actor), words.repeated(label, times), kind)
        for actor, label, kind, times in folded
        if actor in lanes
    )
    return tuple(lanes), columns


class JudgedModel(HasTraits):
    """The rejected run's picture and which of the learner's commands the board is at
    (``step``: 0 before the first; ``steps``, the default, at the end as the judge read it)."""

    step = Int(0)

    def __init__(self, feedback: Any) -> None:
        super().__init__()
        self.feedback = feedback
        ev = feedback.evidence
        self.steps = len(ev.mine_commands) if isinstance(ev, Sides) else 0
        self.step = self.steps

    def picture(self) -> Picture:
        return picture(self.feedback, None if self.step >= self.steps else self.step)

    def forward(self) -> None:
        self.step = min(self.steps, self.step + 1)

    def back(self) -> None:
        self.step = max(0, self.step - 1)
