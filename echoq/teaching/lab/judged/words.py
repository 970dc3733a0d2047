"""What the picture of a rejected answer says: headings, a command as a line, a timeline's
labels, and the alt text -- which is the ✗ line's own words, so the two never disagree."""

from __future__ import annotations

from collections.abc import Callable

from ....ids import JOB_ID_RE
from ..words import short

SIDES = "Your move beside the reference move, from the same starting state"
SCENE = "Your run: the queue as the server held it when the check stopped"
OUTSIDE = "outside the sets"
NO_ROW = "no row"
NO_JOB = "row: the ✗ line names no one job"
NOTHING_OUTSIDE = "nothing outside the sets"
NO_COMMANDS = "It sent no command."
THE_LINE = "✗ "
DIVERGED = "≠ first difference"
TIMELINE = "what happened, in order (from the check's record of its processes and its own moves)"
BROKE = "✗ seen"
ROW_CARD = "row"
LEGEND = "ringed, heavy edge or yellow: named by the ✗ line"

# A row's fields as a ✗ line may name them in words (the glossary's terms).
FIELD_WORDS = {
    "stalled": ("stalled", "stall count"),
    "token": ("token",),
    "attempts": ("attempts",),
    "state": ("state",),
}
COMMAND_CHARS = 96  # a command's line, at most (with its marks, a monospace 10 pt line across the figure)


def starting(state: str) -> str:
    return f"The starting state: {state}."


def queue_line(queue: str, counts: dict[str, int]) -> str:
    held = ", ".join(f"{n} {place}" for place, n in counts.items() if n) or "no jobs"
    return f"queue q = {queue}; it held {held}."


def ids(text: str) -> str:
    """JOB ids as the picture writes them (``JOB…0626``): the last four characters tell them apart."""
    return JOB_ID_RE.sub(lambda m: short(m.group(0)), text)


def command(n: int, args: tuple[str, ...], name_of: Callable[[str], str]) -> str:
    """``3  ZREM emq:{q}:active JOB…0626``: a command as the picture lists it."""
    shown = []
    for arg in args[1:]:
        if arg.startswith("emq:{"):
            named = name_of(arg)
            arg = named if named.startswith("emq:") or named.startswith("…") else "emq:{q}:" + named
        shown.append(ids(arg))
    text = f"{n:>3}  {args[0].upper() if args else '?'} {' '.join(shown)}".rstrip()
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 1] + "…"


def commands_header(title: str, step: int, steps: int, sent: int) -> str:
    more = f" (it sent {sent:,}; the first {steps} are kept)" if sent > steps else ""
    at = "the end" if step >= steps else f"after command {step}" if step else "before command 1"
    return f"{title}, command by command{more} · its board: {at}"


def missing(text: str) -> str:
    return f"the reference move sends{text[3:]} -- yours never does: there the two part"


def reply(value: object) -> str:
    return f"replied {value!r}"


def field_text(name: str, value: object) -> str:
    text = f"{name} = {ids(str(value))}"
    return text if len(text) <= 26 else text[:25] + "…"


def key_summary(kind: str, value: object) -> str:
    if kind == "hash" and isinstance(value, dict):
        return "hash: " + ", ".join(f"{f}={v}" for f, v in value.items())
    if kind == "zset" and isinstance(value, dict):
        return f"sorted set: {len(value)} member(s)"
    return kind


# A timeline's label for each step a child or the check made (its command or mark).
LABELS = {
    "claim": "claims",
    "complete": "completes",
    "extend": "extends",
    "reap": "reaps",
    "retry": "retries",
    "release": "gives back",
    "stalled_check": "stall check",
    "enqueue": "enqueues",
    "EVAL": "your script",
    "EVALSHA": "your script",
    "charge:before": "to charge",
    "charge:after": "charged",
    "returned": "returns",
    "work-done": "work done",
    "popped": "pops",
    "naive_pop": "pops",
    "naive_effect": "effect",
    "effect": "effect",
    "bank_charge": "charges",
    "fast_forward": "fast-forward",
    "work": "works",
    "starts": "starts",
    "frozen": "frozen",
    "resumed": "wakes",
    "killed": "killed",
    "raised": "raises",
}
LABEL_CHARS = 12


def event_label(what: str) -> str:
    """A step's label on the timeline: what the child or the check did, in a word or two."""
    parts = what.split()
    if what.startswith("extend sent ") and len(parts) == 4:  # 'extend sent 3 stale': what the extension got
        label = {"extended": "extends", "stale": "extend: stale", "gone": "extend: gone"}.get(parts[3], "extends")
    elif what.startswith("claimed token "):  # 'claimed token 2 attempts 1'
        label = f"claims (t{parts[2]})"
    else:
        name = what.removeprefix("teaching/").removesuffix(".lua")
        label = LABELS.get(name, name.lower() if name.isupper() else name)
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


def repeated(label: str, times: int) -> str:
    if times <= 1:
        return label
    tail = f" ×{times}" if times < 1000 else f" ×{times / 1000:.1f}k"
    return label[: LABEL_CHARS - len(tail)] + tail


def alt(heading: str, line: str) -> str:
    """A still picture's alt text: what it shows, then the ✗ line's own words."""
    return f"{heading}. {THE_LINE}{line}"
