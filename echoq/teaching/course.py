"""Helpers for the lesson notebooks: the setup cell, showing a script, predict-then-run questions.

Every lesson opens with::

    from echoq import course
    lesson = course.start("02")

which connects (``VALKEY_URL`` or the embedded server), empties the lesson's own queue
(``lesson-02``) and says in words which server it found.
"""

from __future__ import annotations

import html
import io
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from .. import scripts
from ..queue import Queue
from ..server import connect, describe
from . import learner, progress


@dataclass
class Lesson:
    number: str
    queue: Queue

    @property
    def client(self) -> redis.Redis:
        return self.queue.client

    def reset(self) -> str:
        """Empty this lesson's queue; returns a sentence saying so."""
        removed = self.queue.reset()
        return f"Queue {self.queue.name!r} emptied ({removed} keys removed)."

    def fresh_queue(self, part: str) -> Queue:
        """An emptied queue of its own for one part of the lesson (``lesson-02-crash``)."""
        queue = Queue(f"{self.queue.name}-{part}", self.client)
        queue.reset()
        return queue


def start(number: str, *, quiet: bool = False) -> Lesson:
    """Connect, empty the lesson's queue, and say which server this is."""
    client = connect()
    _show_figures_as_pictures()
    lesson = Lesson(number, Queue(learner.queue_name(f"lesson-{number}"), client))
    lesson.queue.reset()
    progress.record_lesson(client, number)
    if not quiet:
        print(describe(client))
        print(f"This lesson uses the queue {lesson.queue.name!r}: its keys all start with {lesson.queue.keys.prefix}")
    return lesson


def _show_figures_as_pictures() -> None:
    """Let a cell that ends in a matplotlib Figure (the lessons' result charts) show it as
    a PNG, whichever backend is active: the charts are built without pyplot, so no
    backend's display hook knows them."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from matplotlib.figure import Figure

    def png(fig: Figure) -> bytes:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=90)
        return buffer.getvalue()

    shell.display_formatter.formatters["image/png"].for_type(Figure, png)


def lua(name: str):  # -> IPython.display.Code
    """A script from ``lua/`` with syntax highlighting, exactly as the server runs it: every
    include inlined where the server sees it (:func:`echoq.scripts.expanded`)."""
    from IPython.display import Code

    return Code(scripts.expanded(name), language="lua")


def reveal(title: str, body: str, *, language: str = "python"):
    """A solution the learner opens on purpose: a collapsed ``<details>`` block."""
    from IPython.display import HTML

    return HTML(
        f"<details><summary><b>{html.escape(title)}</b> (click to reveal)</summary>"
        f'<pre><code class="language-{language}">{html.escape(body)}</code></pre></details>'
    )


def predict(question: str, options: list[str], answer: int, why: str):
    """A predict-then-run question: pick an option, press Check, read why."""
    import ipywidgets as widgets

    choice = widgets.RadioButtons(options=options, value=None, layout=widgets.Layout(width="auto"))
    button = widgets.Button(description="Check", button_style="info")
    verdict = widgets.HTML()

    def on_check(_button: object) -> None:
        if choice.value is None:
            verdict.value = "Pick an answer first."
        elif choice.index == answer:
            verdict.value = f"<b>Right.</b> {html.escape(why)}"
        else:
            verdict.value = "<b>Not quite.</b> Try another answer, or run the next cell and watch what happens."

    button.on_click(on_check)
    return widgets.VBox([widgets.HTML(f"<b>Predict:</b> {html.escape(question)}"), choice, button, verdict])


def wait_until(condition: Callable[[], bool], *, timeout_s: float = 20.0, what: str = "the condition") -> float:
    """Poll ``condition`` until it holds; returns the seconds it took. Raises TimeoutError
    (in one line, naming ``what``) if it does not hold within ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s; is the machine very busy?")
        time.sleep(0.02)
    return time.monotonic() - started
