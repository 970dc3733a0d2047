"""One learner's attempts at one exercise, as HTML for the dashboard, and the CSV as a link.

Every value is escaped (a learner's code is theirs to write: it may hold any text).
Each attempt is a line with its time, verdict and misconception; its code is one click
away, folded in a ``<details>`` (no script needed, so it works in Voila and in a saved page).
"""

from __future__ import annotations

import base64
import html
from datetime import UTC, datetime

from .. import progress

__all__ = ["render_attempts", "csv_link", "MAX_LINK_BYTES"]

MAX_LINK_BYTES = 5_000_000  # a bigger CSV is for `workshop export --csv FILE`, not a data: link


def _e(value: object) -> str:
    return html.escape(str(value))


def render_attempts(learner: str, lesson: str, exercise: str, record: progress.CheckRecord | None, kept: list) -> str:
    """The attempts of ``learner`` at ``lesson``/``exercise`` (oldest first), numbered."""
    head = f"<p><b>{_e(learner)}</b>, lesson {_e(lesson)}, exercise <code>{_e(exercise)}</code>: "
    if record is None or record.attempts == 0:
        return head + "not started (no attempt recorded).</p>"
    dropped = record.attempts - len(kept)
    head += _e(record.status) + (f" (the {dropped} oldest are no longer kept)" if dropped > 0 else "") + ".</p>"
    items = []
    for n, attempt in enumerate(kept, start=max(1, dropped + 1)):
        stamp = datetime.fromtimestamp(attempt.at_ms / 1000, tz=UTC).strftime("%H:%M:%S UTC")
        verdict = "<span class='ok'>passed</span>" if attempt.passed else "<span class='bad'>not yet</span>"
        miss = f", misconception <code>{_e(attempt.misconception)}</code>" if attempt.misconception else ""
        if attempt.code is None:
            code = " (no code recorded)"
        else:
            cut = " (cut at 8,000 characters)" if attempt.truncated else ""
            code = (
                f"<details><summary>code{cut}</summary><pre style='white-space:pre-wrap'>"
                f"{_e(attempt.code)}</pre></details>"
            )
        items.append(f"<li>#{n} at {_e(stamp)}: {verdict}{miss}{code}</li>")
    return head + "<ol style='list-style:none;padding-left:0'>" + "".join(items) + "</ol>"


def csv_link(text: str, attempts: int, filename: str = "echoq-attempts.csv") -> str:
    """A download link holding the CSV itself (a ``data:`` URL: nothing to serve)."""
    data = text.encode("utf-8")
    if len(data) > MAX_LINK_BYTES:
        return (
            f"<p>The CSV is {len(data) / 1e6:.1f} MB, too big for a link: run "
            "<code>python -m echoq workshop export --csv FILE</code>.</p>"
        )
    encoded = base64.b64encode(data).decode()
    return (
        f"<a download='{_e(filename)}' href='data:text/csv;charset=utf-8;base64,{encoded}'>"
        f"download the CSV ({attempts} attempts, {len(data) / 1000:.1f} kB)</a>"
    )
