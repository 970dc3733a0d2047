"""Helpers for the lesson notebooks: the setup cell, scripts and sources shown, predict-then-run questions.

Every lesson opens with::

    from echoq.teaching import course
    lesson = course.start("02")

which connects (``VALKEY_URL`` or the kernel's throwaway server), empties the lesson's own queue
(``lesson-02``) and says in words which server it found.
"""

from __future__ import annotations

import functools
import html
import io
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

from .. import scripts
from ..errors import EchoqError, PermissionDenied, ServerUnavailable
from ..queue import Queue
from ..server import connect, connection_settings, describe
from ..worker import Delivery, Worker, WorkReport
from . import learner, presence, progress


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

    def attach(self, *, reveal: bool = False) -> Attach:
        """How to look at this lesson's server with another client (``redis-cli``, a second
        Python). The password is hidden unless ``reveal=True``."""
        return Attach(connection_settings(self.client), self.queue.name, self.queue.keys.prefix, reveal=reveal)


class Attach:
    """The commands that attach another client to a lesson's server. Shown without the
    password (a placeholder, and how to see it) unless made with ``reveal=True``."""

    HIDDEN = "<password: lesson.attach(reveal=True) shows it>"

    def __init__(self, settings: dict[str, Any], queue: str, prefix: str, *, reveal: bool) -> None:
        self.host = settings.get("host", "127.0.0.1")
        self.port = settings.get("port", 6379)
        self.user = settings.get("username") if settings.get("password") else None
        self.password: str | None = settings.get("password")
        self.queue, self.prefix, self.reveal = queue, prefix, reveal

    def url(self) -> str:
        """The server's URL, its password percent-encoded, or hidden unless revealed."""
        if not self.password:
            return f"redis://{self.host}:{self.port}/0"
        secret = quote(self.password, safe="") if self.reveal else "***"
        user = quote(self.user, safe="") if self.user else ""
        return f"redis://{user}:{secret}@{self.host}:{self.port}/0"

    def __str__(self) -> str:
        user = f" --user {self.user}" if self.user else ""
        ask = " --askpass" if self.password else ""
        lines = [
            "From a terminal, with redis-cli or valkey-cli (it asks for the password):",
            f"  redis-cli -h {self.host} -p {self.port}{user}{ask}",
            f"  then, say:  SCAN 0 MATCH {self.prefix}*",
            "From another Python (a terminal, or a second notebook):",
            f"  VALKEY_URL='{self.url()}' python",
            f"  >>> import echoq; echoq.Queue({self.queue!r}).snapshot().counts",
            "(the embedded server lives as long as this notebook's kernel)",
        ]
        if self.password:
            lines.append(f"password: {self.password if self.reveal else self.HIDDEN}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


_started: str | None = None  # the number of the lesson whose setup cell ran last in this kernel


def start(number: str, *, quiet: bool = False) -> Lesson:
    """Connect, empty the lesson's queue, and say which server this is. On a class server the
    kernel's presence starts (or notes the new lesson)."""
    global _started, _cap
    _started = number
    one_line_errors()
    client = connect()
    _cap = scripts.payload_cap(client)
    _show_figures_as_pictures()
    lesson = Lesson(number, Queue(learner.queue_name(f"lesson-{number}"), client))
    lesson.queue.reset()
    progress.record_lesson(client, number)
    presence.start(client, number)
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


# -- one-line errors -------------------------------------------------------------------------
#
# In a lesson kernel a lost server, an ACL refusal or an interrupt is something that happened
# to the learner, not a bug to debug: one line says what happened and which cell to run. Where
# the lesson runs decides the advice: on a class server (a learner id and VALKEY_URL) never
# "unset VALKEY_URL", which would take the learner off the class and onto a server of their own.

_LOST = (ServerUnavailable, redis.ConnectionError, redis.TimeoutError)
_REFUSED = (PermissionDenied, redis.exceptions.NoPermissionError)


def _where() -> str:
    """'class', 'own' (a server named by VALKEY_URL, a container, the user server) or
    'throwaway' (the kernel's own)."""
    if os.environ.get("VALKEY_URL", "").strip():
        return "class" if learner.learner_id() else "own"
    from .. import server

    try:
        return "throwaway" if server.source() == "throwaway" else "own"
    except EchoqError:
        return "own"  # an ECHOQ_VALKEY it does not know: connect() says so in one line


_setup: str | None = None  # the cell that sets this kernel up, in words (see one_line_errors)


def _setup_cell() -> str:
    if _setup is not None:
        return _setup
    if _started is not None:
        return f'the setup cell at the top (lesson = course.start("{_started}"))'
    return "the first code cell of this notebook"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _lost_line(exc: BaseException | None) -> str:
    # The library's own advice follows its first "; " (and may say "unset VALKEY_URL"): only
    # what happened is kept.
    why = f" ({_first_line(exc).split('; ')[0]})" if exc is not None else ""
    where = _where()
    if where == "throwaway":
        from .. import server

        throwaway = server._throwaway
        if throwaway is not None and throwaway.alive():
            return f"lost the connection to the lesson's Valkey server{why}, which is still running: re-run this cell"
        return (
            f"the lesson's Valkey server has stopped{why}, and every key it held is gone: re-run "
            f"{_setup_cell()}, which starts a new one, and the cells after it ({RUN_ABOVE}), then this one"
        )
    if where == "class":
        return (
            f"the class server did not answer{why}: ask your instructor whether it is running, "
            f"then re-run {_setup_cell()} and the cells after it ({RUN_ABOVE}), then this one"
        )
    return (
        f"Valkey did not answer{why}: check that it is running, then re-run {_setup_cell()} and the cells "
        f"after it ({RUN_ABOVE}), then this one"
    )


def _refused_line(exc: BaseException) -> str:
    said = _first_line(exc)
    if _where() != "class":
        return said
    # The library's advice ends the line after its last "; ": on a class server the only
    # keys a learner may touch are their own, and the instructor is who to ask.
    what = said.rsplit("; ", 1)[0] if isinstance(exc, PermissionDenied) else f"the server's ACL said: {said}"
    if re.search(r"\b(EVAL|EVAL_RO|SCRIPT|FUNCTION|FCALL|FCALL_RO)\b|'(eval|eval_ro|script|function|fcall)", said):
        return (
            f"{what}; the class server runs only the library's scripts, loaded by your instructor: your own Lua "
            "runs on your own private server (the exercise checks start one in your kernel: "
            "echoq.teaching.learner.own_lua_client())"
        )
    mine = f"{learner.learner_id()}.<name>"
    return (
        f"{what}; on the class server you may touch only your own queues ({mine!r}: lesson.name('part') "
        f"makes one): if a lesson cell was refused, re-run {_setup_cell()} and ask your instructor"
    )


def _lost(exc: BaseException) -> bool:
    """True for a server that went away or never answered (not a URL or a setting refused)."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return True
    cause = exc.__cause__ or exc.__context__
    return isinstance(cause, (redis.ConnectionError, redis.TimeoutError, OSError)) or str(exc).startswith(
        ("lost Valkey", "cannot reach")
    )


def _cluster_stopped(exc: BaseException) -> bool:
    """True when ``exc`` names a node of a local cluster this kernel stopped."""
    cluster = sys.modules.get("echoq.teaching.cluster")  # not imported: no cluster was started here
    return cluster is not None and cluster.stopped_here(exc)


def _server_answers() -> bool:
    """True if the server of the lesson started last answers PING now."""
    from .. import server

    if _where() == "throwaway":
        return server._throwaway is not None and server._throwaway.alive()
    try:
        return bool(connect().ping())
    except Exception:  # noqa: BLE001 - any failure means: not confirmed
        return False


# What a lesson cell raises, at its own top level, when what it builds on is not there: the
# cells above it were not run (a restarted kernel, a cell run out of order), or a later cell
# or a second run changed what they had set up.
_NEEDS_ABOVE = (AssertionError, KeyError, AttributeError, NameError, IndexError, TypeError, StopIteration)
RUN_ABOVE = "Run \u25b8 Run All Above Selected Cell"


def _lesson_notebook() -> Path | None:
    """The lesson's notebook file: the kernel's own (JupyterLab names it in JPY_SESSION_NAME),
    else ``NN_*.ipynb`` in the working folder for the lesson started last."""
    named = os.environ.get("JPY_SESSION_NAME", "")
    if named.endswith(".ipynb") and Path(named).is_file():
        return Path(named)
    found = sorted(Path.cwd().glob(f"{_started}_*.ipynb")) if _started else []
    return found[0] if found else None


def is_lesson_cell(source: str) -> bool:
    """True if ``source`` is one of the code cells of the lesson's notebook as saved (not a
    cell the learner wrote or changed: their own code keeps its traceback)."""
    path = _lesson_notebook()
    mine = source.strip()
    if path is None or not mine:
        return False
    try:
        return mine in _code_cells(path, path.stat().st_mtime_ns)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


@functools.lru_cache(maxsize=4)
def _code_cells(path: Path, _mtime_ns: int) -> frozenset[str]:
    """The code cells of a notebook file as saved, stripped (read again when the file changes)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return frozenset("".join(c.get("source", "")).strip() for c in cells if c.get("cell_type") == "code")


def _needs_above(exc: BaseException, at_top_level: bool) -> str | None:
    if isinstance(exc, NameError) and at_top_level:
        return (
            f"this cell uses {exc.name or 'a name'!r}, which a cell above it defines: run the cells above it "
            f"({RUN_ABOVE}), then this one"
        )
    if isinstance(exc, _NEEDS_ABOVE) and at_top_level and not isinstance(exc, EchoqError):
        said = f"{type(exc).__name__}: {_first_line(exc)}" if str(exc).strip() else type(exc).__name__
        return (
            f"this cell builds on what the cells above it set up, and that is not there now ({said}): "
            f"a later cell or a second run changed it; run the cells above it ({RUN_ABOVE}), then this one"
        )
    return None


def explain(exc: BaseException, *, at_top_level: bool = False) -> tuple[str, str] | None:
    """(name, line) to show a learner for ``exc`` in a lesson kernel, or None to keep the
    traceback (a mistake in the learner's own code is worth its traceback).

    ``at_top_level``: ``exc`` was raised by a lesson cell's own statements (its innermost
    frame is the cell, not a function it called, and the cell is the lesson's, unchanged):
    then a failed assert, a missing key or name says which cells to run first."""
    needs = _needs_above(exc, at_top_level)
    if needs is not None:
        return "RunFirst", needs
    if isinstance(exc, KeyboardInterrupt):
        if not _server_answers():
            return "ServerUnavailable", _lost_line(None)
        return (
            "KeyboardInterrupt",
            "the cell stopped part-way; the lesson's server and its keys are still there: "
            "re-run this cell to do it again, or go on",
        )
    if isinstance(exc, _REFUSED):
        return "PermissionDenied", _refused_line(exc)
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, ServerUnavailable)):
        if not _server_answers():
            return "ServerUnavailable", _lost_line(exc)
        if _lost(exc) and _cluster_stopped(exc):
            return "ServerUnavailable", (
                "this cell talks to a local cluster that was stopped (cluster.stop(), in the lesson's last cell, "
                "or a new start_cluster()): run the cell that starts one (cluster = start_cluster(...)), then this one"
            )
        if _lost(exc):  # another server: a cluster's node, one a cell above started or killed
            return "ServerUnavailable", (
                f"a server this cell talks to did not answer ({_first_line(exc).split('; ')[0]}), though the "
                f"lesson's own server does: run the cells above it ({RUN_ABOVE}), which start it, then this one"
            )
        line = _first_line(exc)  # a URL or a setting: the library's words say what to fix
        if _where() == "class" and "VALKEY_URL" in line:
            line = f"{line.split('; ')[0]}; ask your instructor"
        return "ServerUnavailable", line
    if isinstance(exc, EchoqError):
        return type(exc).__name__, _first_line(exc)
    if isinstance(exc, MemoryError):
        capped = learner.memory_cap() is not None  # the class hub's cap
        return ("MemoryError", learner.over_the_cap_line()) if capped else None
    return None


def one_line_errors(setup_cell: str | None = None) -> None:
    """In this kernel, show what :func:`explain` words in one line, instead of a traceback
    into the library. ``setup_cell`` names the cell that sets the kernel up, for the advice
    (by default a lesson's ``course.start`` cell). Does nothing outside IPython."""
    global _setup
    _setup = setup_cell
    shell = ipython_shell()
    if shell is None:
        return

    def show(ip: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> list[str] | None:
        cell = ip.history_manager.input_hist_raw[-1] if ip.history_manager.input_hist_raw else ""
        words = explain(value, at_top_level=_raised_by_the_cell(tb) and is_lesson_cell(cell))
        if words is None:
            ip.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return None
        name, line = words
        shown = [f"\x1b[0;31m{name}\x1b[0m: {line}"]
        ip._showtraceback(type(name, (Exception,), {}), line, shown)  # an error output of one line
        return shown

    shell.set_custom_exc((*_LOST, *_REFUSED, EchoqError, KeyboardInterrupt, MemoryError, *_NEEDS_ABOVE), show)


def _raised_by_the_cell(tb: Any) -> bool:
    """True when the innermost frame of ``tb`` is a cell's top level, not a function (the
    library's, or one the learner wrote: a mistake there keeps its traceback)."""
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "<module>"


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

    return Code(scripts.expanded(name, _payload_cap()), language="lua")


_cap: int | None = None  # the payload cap of the server the last start() connected to


def _payload_cap() -> int | None:
    """The payload cap of this kernel's server, as it stated it when a lesson connected (a
    class server's scripts are expanded for it: the text shown is the text it runs)."""
    return _cap


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
    lines = scripts.expanded(name, _payload_cap()).splitlines(keepends=True)
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


class LessonCheckFailed(EchoqError, AssertionError):
    """A demonstration did not show what it shows (one line: what was seen instead)."""


class TookTooLong(EchoqError, TimeoutError):
    """What a cell waits for did not happen within its deadline."""


class Background:
    """A Worker working in a thread of this kernel (see :func:`in_background`). Its failure,
    if it ends on one, is kept here rather than lost on a background thread's stderr."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=f"echoq-background-{worker.name}", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            self.worker.work()
        except BaseException as exc:  # noqa: BLE001 - kept for the cell that asks
            self.failure = exc

    @property
    def working(self) -> bool:
        return self._thread.is_alive()

    def wait_done(self, queue: Queue, ids: list[str], *, timeout_s: float = 60.0) -> str:
        """Wait until every job of ``ids`` is done, the Worker working all along; returns a
        sentence saying so. Raises in one line if the Worker stopped on a failure, a job was
        dead-lettered, or ``timeout_s`` passed (naming where the jobs not done are)."""
        wanted, started = set(ids), time.monotonic()
        while True:
            snap = queue.snapshot(limit=max(1000, len(wanted)))
            places = [snap.place_of(job) for job in wanted]
            dead = places.count("dead")
            if dead:
                raise LessonCheckFailed(f"{dead} of the {len(wanted)} jobs were dead-lettered: {snap.counts}")
            working = self.working
            if places.count("done") == len(wanted):
                if not working:
                    why = _first_line(self.failure) if self.failure else "it was stopped"
                    return f"all {len(wanted)} jobs done, none lost, none dead; the Worker has stopped ({why})"
                return f"all {len(wanted)} jobs done, none lost, none dead; the Worker is still working"
            if not working:
                why = _first_line(self.failure) if self.failure else "it was stopped"
                raise LessonCheckFailed(f"the Worker stopped before the jobs were done ({why}): {snap.counts}")
            if time.monotonic() - started > timeout_s:
                raise TookTooLong(
                    f"after {timeout_s:.0f} s, {len(wanted) - places.count('done')} of the {len(wanted)} jobs "
                    f"are not done ({snap.counts}); is the machine very busy?"
                )
            time.sleep(0.05)

    def stop(self, timeout_s: float = 30.0) -> Any:
        """Stop the Worker gracefully and wait for it; returns its report."""
        self.worker.stop()
        self._thread.join(timeout_s)
        return self.worker.report


_background: dict[str, Background] = {}  # queue name -> the Worker working on it in the background


def in_background(worker: Worker) -> Background:
    """Start ``worker`` working in a thread of this kernel. A cell run again stops the Worker
    it started before on the same queue, so two never compete for the lesson's jobs."""
    before = _background.pop(worker.queue.name, None)
    if before is not None:
        before.stop()
    _background[worker.queue.name] = started = Background(worker)
    return started


def wait_until(condition: Callable[[], bool], *, timeout_s: float = 20.0, what: str = "the condition") -> float:
    """Poll ``condition`` until it holds; returns the seconds it took. Raises TimeoutError
    (:class:`TookTooLong`, in one line naming ``what``) if it does not hold within ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TookTooLong(f"{what} did not happen within {timeout_s:.0f} s; is the machine very busy?")
        time.sleep(0.02)
    return time.monotonic() - started


def long_job(delivery: Delivery) -> None:
    """A handler whose job takes a minute, worked in small steps; it gives up as soon as the
    job is no longer its own (``delivery.lease_lost``: its worker gave it back, or lost its
    lease), as a long job should."""
    ends = time.monotonic() + 60
    while not delivery.lease_lost and time.monotonic() < ends:
        time.sleep(0.02)  # one step of the work


@dataclass(frozen=True)
class CtrlC:
    """What :func:`ctrl_c_mid_job` saw: the worker's report, and the seconds from the Ctrl-C
    to ``work()`` returning (everything it held completed or given back by then)."""

    report: WorkReport
    stopped_in_s: float


def ctrl_c_mid_job(worker: Worker, *, timeout_s: float = 20.0) -> CtrlC:
    """Run ``worker.work()`` in this kernel's main thread, as a cell does, and press Ctrl-C once
    a handler has started a job: SIGINT to this process, which is what Jupyter's interrupt
    button (■) sends the kernel. Returns the report and how long the stop took."""
    if threading.current_thread() is not threading.main_thread():
        raise LessonCheckFailed("run this in a cell (the kernel's main thread): only there does work() take Ctrl-C")
    pressed: list[float] = []
    failed: list[BaseException] = []

    def press() -> None:
        try:
            wait_until(lambda: bool(worker.in_flight), timeout_s=timeout_s, what="a handler starting a job")
        except TookTooLong as exc:
            failed.append(exc)
            worker.stop()
            return
        pressed.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press, name="echoq-ctrl-c", daemon=True).start()
    report = worker.work()
    if failed:
        raise failed[0]
    return CtrlC(report, time.monotonic() - pressed[0])
