"""One learner's attempts at one exercise, as HTML for the dashboard, and the CSV as a link.

Every value is escaped (a learner's code is theirs to write: it may hold any text).
Each attempt is a line with its time, verdict and misconception; its code is one click
away, folded in a ``<details>`` (no script needed, so it works in Voila and in a saved page).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from .. import progress
from .html import Markup, esc, esc_block, join
from .html import render as fill

__all__ = ["render_attempts", "csv_link", "MAX_LINK_BYTES"]

MAX_LINK_BYTES = 5_000_000  # a bigger CSV is for `workshop export --csv FILE`, not a data: link


def render_attempts(
    learner: str, lesson: str, exercise: str, record: progress.CheckRecord | None, kept: list
) -> Markup:
    """The attempts of ``learner`` at ``lesson``/``exercise`` (oldest first), numbered."""
    head = fill(
        "<p><b>$learner</b>, lesson $lesson, exercise <code>$exercise</code>: ",
        learner=learner,
        lesson=lesson,
        exercise=exercise,
    )
    if record is None or record.attempts == 0:
        return Markup(head + "not started (no attempt recorded).</p>")
    dropped = record.attempts - len(kept)
    older = f" (the {dropped} oldest are no longer kept)" if dropped > 0 else ""
    head = Markup(head + fill("$status$older.</p>", status=record.status, older=older))
    items = []
    for n, attempt in enumerate(kept, start=max(1, dropped + 1)):
        stamp = datetime.fromtimestamp(attempt.at_ms / 1000, tz=UTC).strftime("%H:%M:%S UTC")
        verdict = Markup("<span class='ok'>passed</span>" if attempt.passed else "<span class='bad'>not yet</span>")
        miss = fill(", misconception <code>$m</code>", m=attempt.misconception) if attempt.misconception else ""
        if attempt.code is None:
            code = Markup(" (no code recorded)")
        else:
            code = fill(
                "<details><summary>code$cut</summary><pre style='white-space:pre-wrap'>$code</pre></details>",
                cut=" (cut at 8,000 characters)" if attempt.truncated else "",
                code=esc_block(attempt.code),  # the whole submitted text (bounded when recorded)
            )
        items.append(
            fill(
                "<li>#$n at $stamp: $verdict$miss$code</li>",
                n=n,
                stamp=stamp,
                verdict=verdict,
                miss=Markup(miss),
                code=code,
            )
        )
    return Markup(head + fill("<ol style='list-style:none;padding-left:0'>$items</ol>", items=join("", items)))


def csv_link(text: str, attempts: int, filename: str = "echoq-attempts.csv") -> str:
    """A download link holding the CSV itself (a ``data:`` URL: nothing to serve)."""
    data = text.encode("utf-8")
    if len(data) > MAX_LINK_BYTES:
        return (
            f"<p>The CSV is {len(data) / 1e6:.1f} MB, too big for a link: run "
            "<code>python -m echoq.teaching workshop export --csv FILE</code>.</p>"
        )
    encoded = base64.b64encode(data).decode()
    return (
        f"<a download='{esc(filename)}' href='data:text/csv;charset=utf-8;base64,{encoded}'>"
        f"download the CSV ({attempts} attempts, {len(data) / 1000:.1f} kB)</a>"
    )
