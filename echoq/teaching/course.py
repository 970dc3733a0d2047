"""Helpers for the lesson notebooks: the setup cell, scripts and sources shown, predict-then-run questions.

Every lesson opens with::

    from echoq import course
    lesson = course.start("02")

which connects (``VALKEY_URL`` or the embedded server), empties the lesson's own queue
(``lesson-02``) and says in words which server it found.
"""

from __future__ import annotations

import html
import io
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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

    def name(self, part: str) -> str:
        """A name for one part of the lesson, in the learner's namespace (``lesson-03-bank``)."""
        return f"{self.queue.name}-{part}"

    def fresh_queue(self, part: str) -> Queue:
        """An emptied queue of its own for one part of the lesson (``lesson-02-crash``)."""
        queue = Queue(self.name(part), self.client)
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


def ipython_shell() -> Any:
    """The IPython shell this code runs in, or None (no IPython, or not inside it)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _show_figures_as_pictures() -> None:
    """Let a cell that ends in a matplotlib Figure (the lessons' result charts) show it as
    a PNG, whichever backend is active: the charts are built without pyplot, so no
    backend's display hook knows them."""
    shell = ipython_shell()
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


_INCLUDE_START = re.compile(r"^-- ---- @include (\S+) ----\n?$")
_INCLUDE_END = re.compile(r"^-- ---- end of (\S+) ----\n?$")


@dataclass(frozen=True)
class ScriptPiece:
    """A run of lines of an expanded script: shown open, or folded under its include's name."""

    text: str
    folded: str | None = None  # the include folded here, or None for text shown open


class FoldedScript:
    """A script exactly as the server runs it (:func:`echoq.scripts.expanded`), its helpers
    folded: the concatenation of :attr:`pieces` IS the expanded text, in the server's order.
    Shown as HTML, each folded include is a ``<details>`` block, one click away."""

    def __init__(self, name: str, pieces: list[ScriptPiece]) -> None:
        self.name, self.pieces = name, pieces

    @property
    def text(self) -> str:
        return "".join(piece.text for piece in self.pieces)

    def _repr_html_(self) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import LuaLexer

        lexer = LuaLexer(stripnl=False, ensurenl=False)
        formatter = HtmlFormatter(noclasses=True, nowrap=True)
        pre = 'style="margin:0;padding:0 0 0 4px;background:none;line-height:1.35"'
        folded = [p for p in self.pieces if p.folded]
        lines = self.text.count("\n")
        out = [
            f"<div><p><code>{html.escape(self.name)}.lua</code> exactly as the server runs it ({lines} lines): "
            f"its own code open, the {len(folded)} helper(s) it includes folded in their places (click one to "
            "open it).</p>"
        ]
        for piece in self.pieces:
            code = highlight(piece.text, lexer, formatter)
            if piece.folded:
                n = piece.text.count("\n")
                out.append(
                    f'<details style="margin:2px 0"><summary><code>@include {html.escape(piece.folded)}</code> '
                    f"· {n} lines (click to open)</summary><pre {pre}>{code}</pre></details>"
                )
            else:
                out.append(f"<pre {pre}>{code}</pre>")
        out.append("</div>")
        return "".join(out)

    def __repr__(self) -> str:
        return "".join(
            f"-- [folded: @include {p.folded}, {p.text.count(chr(10))} lines]\n" if p.folded else p.text
            for p in self.pieces
        )


def lua_folded(name: str, open_includes: tuple[str, ...] = ()) -> FoldedScript:
    """Like :func:`lua`, with every include folded except those in ``open_includes`` (an
    open include's own includes are folded in turn): the script's own code reads first,
    each helper one click away, and together they are still exactly the text the server runs."""
    lines = scripts.expanded(name).splitlines(keepends=True)
    pieces: list[ScriptPiece] = []
    shown: list[str] = []
    i = 0
    while i < len(lines):
        start = _INCLUDE_START.match(lines[i])
        if start is None or start.group(1) in open_includes:
            shown.append(lines[i])
            i += 1
            continue
        depth, j = 0, i
        while j < len(lines):  # the matching end marker (includes nest)
            depth += 1 if _INCLUDE_START.match(lines[j]) else -1 if _INCLUDE_END.match(lines[j]) else 0
            if depth == 0:
                break
            j += 1
        if shown:
            pieces.append(ScriptPiece("".join(shown)))
            shown = []
        pieces.append(ScriptPiece("".join(lines[i : j + 1]), folded=start.group(1)))
        i = j + 1
    if shown:
        pieces.append(ScriptPiece("".join(shown)))
    return FoldedScript(name, pieces)


def reveal(title: str, body: str, *, language: str = "python"):
    """A solution the learner opens on purpose: a collapsed ``<details>`` block."""
    from IPython.display import HTML

    return HTML(
        f"<details><summary><b>{html.escape(title)}</b> (click to reveal)</summary>"
        f'<pre><code class="language-{language}">{html.escape(body)}</code></pre></details>'
    )


class Prediction:
    """A predict-then-run question: each option carries its own explanation, shown when it is
    picked -- the right one says why, each wrong one says what it overlooks. In JupyterLab it
    is a widget (pick, press Check); on a static page it reads as the question and its options.
    """

    def __init__(self, question: str, options: list[tuple[str, str]], answer: int) -> None:
        if not options or not all(isinstance(o, tuple) and len(o) == 2 for o in options):
            raise ValueError("options are (text, explanation) pairs: one explanation per option")
        if not 0 <= answer < len(options):
            raise ValueError(f"answer must index one of the {len(options)} options")
        self.question = question
        self.options = options
        self.answer = answer
        self.tries: list[int] = []
        self._widget = None

    def choose(self, index: int) -> str:
        """The verdict, in words, for picking option ``index``."""
        if not 0 <= index < len(self.options):
            return f"Pick one of the options 0 to {len(self.options) - 1}."
        self.tries.append(index)
        text, why = self.options[index]
        if index == self.answer:
            return f"Right. {why}"
        return f"Not quite: {why} Try another answer, or run the next cell and see."

    @property
    def widget(self):  # -> ipywidgets.VBox
        if self._widget is None:
            import ipywidgets as widgets

            choice = widgets.RadioButtons(
                options=[text for text, _ in self.options], value=None, layout=widgets.Layout(width="auto")
            )
            button = widgets.Button(description="Check", button_style="info")
            verdict = widgets.HTML()

            def on_check(_button: object) -> None:
                if choice.index is None:
                    verdict.value = "Pick an answer first."
                    return
                words = self.choose(choice.index)
                head, _, rest = words.partition(" ")
                verdict.value = f"<b>{html.escape(head)}</b> {html.escape(rest)}"

            button.on_click(on_check)
            self._widget = widgets.VBox(
                [widgets.HTML(f"<b>Predict:</b> {html.escape(self.question)}"), choice, button, verdict]
            )
        return self._widget

    def __repr__(self) -> str:
        options = "\n".join(f"  ( ) {text}" for text, _ in self.options)
        return f"Predict: {self.question}\n{options}"

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{html.escape(text)}</li>" for text, _ in self.options)
        return f"<p><b>Predict:</b> {html.escape(self.question)}</p><ul>{items}</ul>"

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict:
        bundle = {"text/plain": repr(self), "text/html": self._repr_html_()}
        try:
            bundle.update(self.widget._repr_mimebundle_(include=include, exclude=exclude) or {})
        except ImportError:  # no ipywidgets: the static form is all there is
            pass
        bundle["text/plain"] = repr(self)
        return bundle


def predict(question: str, options: list[tuple[str, str]], answer: int) -> Prediction:
    """A predict-then-run question: ``options`` are (text, explanation) pairs; ``answer`` is
    the index of the right one. Ask it before the cell that reveals the answer."""
    return Prediction(question, options, answer)


def ask(lesson: str, key: str) -> Prediction:
    """The course's question ``key`` of ``lesson`` (see :mod:`echoq.teaching.predictions`)."""
    from .predictions import QUESTIONS

    text, options, answer = QUESTIONS[lesson][key]
    return Prediction(_own(text), [(_own(o), _own(why)) for o, why in options], answer)


_LESSON_KEY = re.compile(r"emq:\{(lesson-\d\d[\w-]*)\}")


def _own(text: str) -> str:
    """A question names a lesson's keys as the learner's own: ``emq:{lesson-00}:pending`` is
    ``emq:{ada.lesson-00}:pending`` for learner ``ada`` on a shared server."""
    return _LESSON_KEY.sub(lambda m: "emq:{" + learner.queue_name(m.group(1)) + "}", text)


def source(obj: object):  # -> IPython.display.Code
    """The Python source of a function or class of the kit or the library, to read in place."""
    import inspect

    from IPython.display import Code

    return Code(inspect.getsource(obj), language="python")


def wait_until(condition: Callable[[], bool], *, timeout_s: float = 20.0, what: str = "the condition") -> float:
    """Poll ``condition`` until it holds; returns the seconds it took. Raises TimeoutError
    (in one line, naming ``what``) if it does not hold within ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s; is the machine very busy?")
        time.sleep(0.02)
    return time.monotonic() - started
