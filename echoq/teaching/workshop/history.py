"""One learner's submissions at one exercise, as HTML for the dashboard, and a file as a download link.

Every value is escaped (a learner's code is theirs to write: it may hold any text).
Each submission is a line with its time, verdict and misconception; its code is one click
away, folded in a ``<details>`` (no script needed, so it works in Voila and in a saved page).
"""

from __future__ import annotations

import base64

from .. import progress
from .admin import command
from .board import local_time, time_zone
from .html import Markup, esc, esc_block, join
from .html import render as fill

__all__ = ["render_submissions", "download_link", "MAX_LINK_BYTES"]

MAX_LINK_BYTES = 5_000_000  # a bigger file is for `workshop export`, not a data: link


def render_submissions(
    learner: str, lesson: str, exercise: str, record: progress.CheckRecord | None, kept: list
) -> Markup:
    """The submissions of ``learner`` at ``lesson``/``exercise`` (oldest first), numbered."""
    head = fill(
        "<p><b>$learner</b>, lesson $lesson, exercise <code>$exercise</code>: ",
        learner=learner,
        lesson=lesson,
        exercise=exercise,
    )
    if record is None or record.submissions == 0:
        return Markup(head + "not started (no submission recorded).</p>")
    dropped = record.submissions - len(kept)
    older = f" (the {dropped} oldest are no longer kept)" if dropped > 0 else ""
    head = Markup(head + fill("$status$older (times in local time, $zone).</p>", status=record.status, older=older,
                              zone=time_zone()))  # fmt: skip
    items = []
    for n, submission in enumerate(kept, start=max(1, dropped + 1)):
        stamp = local_time(submission.at_ms)
        verdict = Markup("<span class='ok'>passed</span>" if submission.passed else "<span class='bad'>not yet</span>")
        miss = fill(", misconception <code>$m</code>", m=submission.misconception) if submission.misconception else ""
        if submission.code is None:
            code = Markup(" (no code recorded)")
        else:
            code = fill(
                "<details><summary>code$cut</summary><pre style='white-space:pre-wrap'>$code</pre></details>",
                cut=" (cut at 8,000 characters)" if submission.truncated else "",
                code=esc_block(submission.code),  # the whole submitted text (bounded when recorded)
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


def download_link(text: str, filename: str, mime: str, what: str) -> str:
    """A download link holding the file itself (a ``data:`` URL: nothing to serve)."""
    data = text.encode("utf-8")
    if len(data) > MAX_LINK_BYTES:
        return (
            f"<p>The {esc(what)} is {len(data) / 1e6:.1f} MB, too big for a link: run "
            f"<code>{esc(command('export --csv FILE'))}</code>.</p>"
        )
    encoded = base64.b64encode(data).decode()
    return (
        f"<a download='{esc(filename)}' href='data:{mime};charset=utf-8;base64,{encoded}'>"
        f"{esc(filename)}</a> ({esc(what)}, {len(data) / 1000:.1f} kB)"
    )
