"""What every lab panel says: the small pieces (a JOB id, a lease, a count), the lifecycle
(connected, gone, refused, reset), the timeline's status and the alt text. Each panel's own
sentences (its title, the readout of each move, its settings) are in its ``words`` module
(``claim/words.py`` ...), next to the model and figure that use them.

Functions take facts (job ids, counts, outcomes, key names) and return plain text; no
function here reads a server or a widget. A readout names the keys it talks about, says
what the last move did, and never shows a number it did not get from the frame's snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ...queue import Snapshot

# -- small pieces -----------------------------------------------------------------------------

NOW = "server now"
EXPIRED_ZONE = "expired"


def short(job_id: str) -> str:
    """``JOB…WXYZ``: the last four characters are random, so they tell a handful apart."""
    return f"JOB…{job_id[-4:]}"


def tag(job_id: str) -> str:
    """The four characters a marker's label shows."""
    return job_id[-4:]


def seconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s"


def seconds_ahead(ms: float) -> str:
    return f"+{ms / 1000:g} s"


def seconds_ago(ms: float) -> str:
    return f"−{ms / 1000:g} s"


def marker(job_id: str, ms_left: int, extra: str = "", extra_line: bool = False) -> str:
    """A leased marker's label: its id, then its lease (time left, or time since it ran out),
    then ``extra`` after the lease or, with ``extra_line``, on a line of its own."""
    lease = f"{ms_left / 1000:.1f}s" if ms_left > 0 else f"-{-ms_left / 1000:.1f}s"
    if extra and extra_line:
        return f"{tag(job_id)}\n{lease}\n{extra}"
    return "\n".join(part for part in (tag(job_id), lease if not extra else f"{lease} {extra}") if part)


def key_label(queue: str, part: str, room: int | None = None, suffix: str = "") -> list[str]:
    """A key's name on a picture, the queue's name whole: ``emq:{<queue>}:<part>`` and the
    ``suffix`` on one line where ``room`` characters hold it, else the name wrapped after a
    ``{``, ``.``, ``-`` or ``}`` into lines of at most ``room`` (a piece longer than that
    is cut where it must be: every character stays, in order), the suffix after its last
    line, or on a line of its own."""
    whole = f"emq:{{{queue}}}:{part}"
    if room is None or len(whole) + len(suffix) <= room:
        return [whole + suffix]
    room = max(room, 1)
    lines = [""]
    for piece in re.split(r"(?<=[{.}-])|(?=:[^:]*$)", whole):
        while piece:
            if lines[-1] and len(lines[-1]) + len(piece) > room:
                lines.append("")
            take = piece[: room - len(lines[-1])]
            lines[-1] += take
            piece = piece[len(take) :]
    if suffix and len(lines[-1]) + len(suffix) <= room:
        lines[-1] += suffix
    elif suffix:
        lines.append(suffix.lstrip(" ·"))
    return lines


def count(n: int, noun: str = "job") -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def more(n: int) -> str:
    return f"+{n} more"


def listed(ids: Sequence[str], total: int | None = None, at_most: int = 3) -> str:
    total = len(ids) if total is None else total
    names = ", ".join(short(j) for j in list(ids)[:at_most])
    return names + (", …" if total > at_most else "")


def where(keys: Callable[[str], str], snap: Snapshot, places: Iterable[str] = ("pending", "active", "dead")) -> str:
    """Where the jobs are now, naming the keys; a place is left out when empty (dead) or unlisted."""
    parts = []
    for place in places:
        n = snap.counts[place]
        if place in ("dead", "done", "scheduled") and n == 0:
            continue
        members = list(getattr(snap, place))
        parts.append(f"{keys(place)} holds {n}" + (f" ({listed(members, n)})" if n else ""))
    return "Now " + "; ".join(parts) + "." if parts else ""


# -- every panel -------------------------------------------------------------------------------


def unopened(queue: str) -> str:
    return f"Not connected yet: the panel connects to Valkey (queue {queue!r}) when it is shown or at its first move."


def connected(where_: str, queue: str) -> str:
    return f"Connected to Valkey at {where_}; queue {queue!r}, emptied for a clean start."


def gone(where_: str, error: str) -> str:
    return (
        f"Valkey went away: cannot reach {where_} ({error}). The buttons are off and the picture shows the "
        "last read; press reconnect once the server is back."
    )


def not_connected(move: str) -> str:
    return f"{move}: not connected to Valkey. Press reconnect."


def refused(move: str, error: BaseException) -> str:
    said = str(error).rstrip()
    return f"{move} refused: {said}{'' if said.endswith(('.', '!', '?')) else '.'} Nothing changed."


def reset(deleted: int, queue: str) -> str:
    return f"reset: deleted {deleted} keys of queue {queue!r}; every setting is back to its default."


def sampled() -> str:
    return "Re-read the queue."


def setting(said: Mapping[str, Callable[[Any], str]], name: str, value: Any) -> str:
    """A setting's change in the panel's words (``said``: its words module's ``SETTINGS``)."""
    say = said.get(name)
    return say(value) if say else f"{name} = {value}."


def status_live(running: bool) -> str:
    return "live · animating" if running else "live"


def status_held(index: int, last: int, clock: str) -> str:
    newer = last - index
    later = f"; {newer} newer frame{'s' if newer != 1 else ''} recorded" if newer > 0 else ""
    return f"paused at {clock} (frame {index + 1} of {last + 1}{later}) · read-only: press live to return"


def jumped(n: int) -> str:
    return (
        f"({n} recorded move{'s' if n != 1 else ''} came faster than the picture could show "
        f"{'them' if n != 1 else 'it'}: it jumped to the server's present; press replay to watch "
        f"{'them' if n != 1 else 'it'}.)"
    )


def banner_held(clock: str) -> str:
    return f"recorded {clock} · read-only"


def alt(title: str, snap: Snapshot | None, extra: str = "") -> str:
    """Alt text for a still picture of a panel: its title and where the jobs are."""
    if snap is None:
        return f"{title}. No read of the queue yet."
    parts = []
    for place in ("pending", "active", "done", "dead", "scheduled"):
        n = snap.counts.get(place, 0)
        if n or place in ("pending", "active"):
            parts.append(f"{place} {n}" + (f" ({listed(list(getattr(snap, place)), n)})" if n else ""))
    return f"{title}. Job markers by place: " + "; ".join(parts) + "." + (f" {extra}" if extra else "")


def still_alt(heading: str, snap: Snapshot | None, readout: str) -> str:
    """A still picture's alt text: its heading, where the jobs are, and the readout's own
    words for the moment it shows (so the two can never disagree)."""
    return alt(heading, snap, f"Readout: {readout}" if readout else "")


def fast_forwarded(moved: int, how: str) -> str:
    return f"fast_forward.lua (a teaching script; the clock is untouched) moved {moved} lease deadline(s) {how}."
