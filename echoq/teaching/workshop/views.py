"""The workshop's two widgets: the instructor's :class:`Dashboard` and a learner's
:class:`ClassWorkerPanel` (class chaos, one cell). Both redraw from a background thread
(setting a widget's value from a thread is safe; displaying from one is not)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import ipywidgets as widgets
import redis

from ...errors import EchoqError, InvalidArgument
from .. import course, progress
from . import classroom, export, grade, history
from .admin import Workshop
from .board import Board, BoardData, exercises_of, local_time, render, render_chaos, time_zone
from .html import Markup, esc
from .html import render as fill
from .hubinfo import HubView
from .watch import last_events

__all__ = ["Dashboard", "ClassWorkerPanel", "class_worker", "dashboard", "one_line_errors", "practice_alone"]


def one_line_errors() -> None:
    """In this kernel, show an echoq error (PermissionDenied, InvalidArgument, ...), a lost
    class server or an ACL refusal as the one line it is, with advice that keeps the learner
    on the class server (see :func:`echoq.teaching.course.one_line_errors`). A learner's own
    mistakes keep IPython's full traceback. Does nothing outside IPython."""
    course.one_line_errors(setup_cell="the class worker cell (workshop.class_worker())")


STALE_S = 6  # no fresh reading for this long: the page says it is disconnected


def stale_banner(after_s: float = STALE_S) -> str:
    """A banner that shows itself ``after_s`` seconds after it was drawn -- by CSS alone, so
    it works when nothing else on the page does: every refresh draws it afresh (restarting
    its clock), and when the refreshes stop (the dashboard's kernel or server is gone, the
    hub stopped) it appears over the last reading, saying that reading is old."""
    return (
        "<style>@keyframes echoq-stale{to{visibility:visible}}</style>"
        "<div class='echoq-disconnected' role='alert' style='visibility:hidden;position:fixed;top:0;left:0;"
        "right:0;z-index:1000;background:#b00020;color:#fff;padding:10px 16px;font:600 15px system-ui,sans-serif;"
        f"animation:echoq-stale 0s linear {after_s:g}s forwards'>"
        f"Disconnected: no reading for {after_s:g} s -- the dashboard's kernel or server is gone, "
        "so what is below is old. Reload the page (or restart the dashboard).</div>"
    )


def _line(exc: BaseException) -> Markup:
    """The first line of an error, escaped whole (it may quote what a learner wrote)."""
    return esc(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, longest=None)


class Dashboard(widgets.VBox):
    """The instructor's page, for a live class: where the class is and who is stuck first,
    then the learners and what the ACL refused; class chaos folded until it is opened; the
    watchdog's last lines; every learner's submissions and the gradebook."""

    def __init__(
        self,
        client: redis.Redis,
        learners: list[str],
        *,
        class_name: str = "class",
        refresh_s: float = 1.0,
        auto: bool = True,
        folder: Path | None = None,
        hub_users: dict[str, str] | None = None,
        names: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.folder = folder  # the workshop's: where the watchdog's log is
        self.class_name = class_name
        self.hub_users = dict(hub_users or {})
        self.names = dict(names or {})  # learner id -> the roster's name
        self.board = Board(
            client, learners, class_name=class_name, hub_users=hub_users, hub=HubView(), names=self.names
        )
        people = [(self.names.get(lid) or lid, lid) for lid in sorted(learners)]  # shown by name, one order: the id
        self.refresh_s = refresh_s
        self.last: BoardData | None = None
        self.view = widgets.HTML()
        self.chaos_view = widgets.HTML()
        self.watchdog_view = widgets.HTML()
        self.readout = widgets.HTML("<i>Produce jobs, then kill a worker: the scoreboard must keep 0 lost.</i>")
        self.jobs = widgets.BoundedIntText(value=50, min=1, max=classroom.MAX_JOBS_PER_CLICK, description="jobs")
        self.produce_button = widgets.Button(description="produce jobs", button_style="primary")
        self.who = widgets.Dropdown(options=people, description="learner")
        self.kill_button = widgets.Button(description="kill worker", button_style="danger")
        self.kill_random_button = widgets.Button(description="kill a random worker", button_style="warning")
        self.kill_all_button = widgets.Button(description="kill every worker", button_style="danger")
        self.stop_all_button = widgets.Button(description="stop every worker", tooltip="each finishes its job")
        self.new_round_button = widgets.Button(
            description="new round", tooltip="stop every worker, empty the class queue, zero the scoreboard"
        )
        self.live = widgets.ToggleButton(value=auto, description="live", tooltip="refresh every second")
        self.live.observe(lambda _c: self.refresh(), names="value")  # paused: no "disconnected" banner
        self.produce_button.on_click(lambda _b: self._act(lambda: self.produce(self.jobs.value)))
        self.kill_button.on_click(lambda _b: self._act(lambda: self.kill([self.who.value])))
        self.kill_random_button.on_click(lambda _b: self._act(self.kill_random))
        self.kill_all_button.on_click(lambda _b: self._act(lambda: self.kill(self.running())))
        self.stop_all_button.on_click(lambda _b: self._act(self.stop_all))
        self.new_round_button.on_click(lambda _b: self._act(self.new_round))
        controls = widgets.VBox(
            [
                widgets.HBox([self.jobs, self.produce_button, self.stop_all_button, self.new_round_button]),
                widgets.HBox([self.who, self.kill_button, self.kill_random_button, self.kill_all_button]),
                self.readout,
                self.chaos_view,
            ]
        )
        # Class chaos is ten minutes of a class: folded (below the learners) until opened.
        self.chaos = widgets.Accordion(
            children=[controls], titles=("Class chaos: produce jobs, kill workers, the scoreboard",)
        )
        self.chaos.selected_index = None
        # Submissions: one learner and exercise at a time, redrawn only when its history grows,
        # so an opened code stays open while the page refreshes.
        self.submission_learner = widgets.Dropdown(options=people, description="learner")
        self.submission_exercise = widgets.Dropdown(
            options=[(f"{lesson} {ex}", (lesson, ex)) for lesson, ex in exercises_of()],
            description="exercise",
        )
        self.submissions_view = widgets.HTML()
        self.gradebook_button = widgets.Button(
            description="gradebook", tooltip="one row per learner and exercise: CSV and JSON to download"
        )
        self.gradebook_view = widgets.HTML()
        self.grade_button = widgets.Button(
            description="grade", tooltip="judge every learner's newest submissions again, out of their reach (root)"
        )
        self.grade_view = widgets.HTML()
        self.grade_button.on_click(lambda _b: self.start_grading())
        self._grading: threading.Thread | None = None
        self.submission_learner.observe(lambda _c: self.show_submissions(), names="value")
        self.submission_exercise.observe(lambda _c: self.show_submissions(), names="value")
        self.gradebook_button.on_click(lambda _b: self._act(self.export_gradebook))
        self._submissions_shown: tuple | None = None
        submissions = widgets.VBox(
            [
                widgets.HTML("<h3>Submissions and the gradebook</h3>"),
                widgets.HBox(
                    [self.submission_learner, self.submission_exercise, self.gradebook_button, self.grade_button]
                ),
                self.gradebook_view,
                self.grade_view,
                self.submissions_view,
            ]
        )
        title = widgets.HTML("<h2 style='margin:4px 0'>echoq workshop: the class</h2>")
        super().__init__([widgets.HBox([title, self.live]), self.view, self.chaos, self.watchdog_view, submissions])
        self._closing = threading.Event()
        self.refresh()
        self.show_submissions()
        self._thread = threading.Thread(target=self._loop, name="echoq-dashboard", daemon=True)
        self._thread.start()

    @classmethod
    def for_workshop(cls, workshop: Workshop, **kwargs: object) -> Dashboard:
        return cls(
            workshop.instructor(),
            list(workshop.learners),
            class_name=workshop.class_name,
            folder=workshop.dir,
            hub_users={lid: ln.hub_user for lid, ln in workshop.learners.items()},
            names={lid: ln.display for lid, ln in workshop.learners.items()},
            **kwargs,
        )

    # -- actions (also called by tests and benches) ----------------------------------------

    def produce(self, count: int) -> str:
        ids = classroom.produce(self.client, count, klass=self.class_name)
        return f"Produced {len(ids)} jobs into emq:{{{classroom.ClassKeys(self.class_name).queue}}}:pending."

    def running(self) -> list[str]:
        """Learners whose class worker runs in a kernel that is alive (its presence key lives):
        a worker whose kernel died cannot obey a kill, so it is never picked."""
        data = self.refresh() or self.last
        if data is None:
            return []
        return [lv.learner for lv in data.learners if lv.worker == "running"]

    def kill(self, learners: list[str]) -> str:
        if not learners:
            return "No running worker to kill."
        who = classroom.kill(self.client, learners, klass=self.class_name)
        return (
            f"Kill ordered for {', '.join(self.names.get(lid) or lid for lid in who)}: written to "
            f"emq:{{{self.class_name}.control}}:kills; "
            "each worker reads its order within 0.1 s and dies as if SIGKILLed."
        )

    def stop_all(self) -> str:
        classroom.stop_all(self.client, klass=self.class_name)
        return "Stop ordered for every worker: each finishes the job in its hands and ends."

    def new_round(self) -> str:
        shown = (self.refresh() or self.last).learners
        alive = [lv.learner for lv in shown if lv.kernel == "alive"]
        late = classroom.new_round(self.client, alive, klass=self.class_name, learners=[lv.learner for lv in shown])
        left = f" Still running after 10 s: {', '.join(late)}." if late else ""
        return (
            "New round: every worker stopped, the class queue emptied, the scoreboard at 0; "
            f"learners run their cell again to join.{left}"
        )

    def kill_random(self) -> str:
        running = self.running()
        return self.kill([random.choice(running)] if running else [])

    def gradebook(self) -> list[export.Row]:
        """The gradebook, as ``workshop export`` writes it (see :mod:`.export`)."""
        people = [(lid, self.names.get(lid) or lid, self.hub_users.get(lid, lid)) for lid in self.board.learners]
        return export.rows(self.client, people, grade.load(self.folder) if self.folder is not None else None)

    def start_grading(self) -> threading.Thread | None:
        """Run ``workshop grade`` in the background, its progress and then each learner's
        reported and verified verdicts below the button; None when a run is under way."""
        if self._grading is not None and self._grading.is_alive():
            return None
        if self.folder is None:
            self.grade_view.value = "<p><b>Refused:</b> grading needs the workshop folder of a class `up` made.</p>"
            return None
        folder = self.folder
        self.grade_button.disabled = True
        self.grade_view.value = "<p>grading: starting</p>"

        def step(done: int, total: int) -> None:
            self.grade_view.value = fill("<p>grading: $done of $total submissions judged</p>", done=done, total=total)

        def run() -> None:
            try:
                lines = grade.grade(folder, progress=step, bar=False)
                self.grade_view.value = fill("<p>$head</p>", head=lines[0]) + render_verified(self.gradebook())
            except EchoqError as exc:
                self.grade_view.value = fill("<p><b>Refused:</b> $why</p>", why=_line(exc))
            except (redis.RedisError, OSError) as exc:
                self.grade_view.value = fill("<p><b>Grading stopped:</b> $why</p>", why=_line(exc))
            finally:
                self.grade_button.disabled = False

        self._grading = threading.Thread(target=run, name="echoq-grading", daemon=True)
        self._grading.start()
        return self._grading

    def export_gradebook(self) -> str:
        """The gradebook as two download links, CSV and JSON: the same files as ``workshop export``."""
        rows = self.gradebook()
        self.gradebook_view.value = (
            history.download_link(export.to_csv(rows), "echoq-gradebook.csv", "text/csv", "CSV")
            + " &middot; "
            + history.download_link(export.to_json(rows), "echoq-gradebook.json", "application/json", "JSON")
        )
        learners = len(self.board.learners)
        return f"Gradebook ready: {len(rows)} rows, every exercise of {learners} learners (the links below)."

    def show_submissions(self, force: bool = True) -> None:
        """The selected learner's submissions at the selected exercise (redrawn only when new ones came)."""
        learner, choice = self.submission_learner.value, self.submission_exercise.value
        if learner is None or choice is None:
            self.submissions_view.value = "<p>No exercise to show.</p>"
            return
        lesson, exercise = choice
        record = None
        if self.last is not None:
            for lv in self.last.learners:
                if lv.learner == learner:
                    record = next((c for c in lv.checks if (c.lesson, c.exercise) == choice), None)
        key = (learner, choice, record.submissions if record else 0)
        if not force and key == self._submissions_shown:
            return
        try:
            kept = progress.submissions(self.client, lesson, exercise, learner)
        except (EchoqError, redis.RedisError) as exc:
            self.submissions_view.value = f"<p><b>The class server did not answer:</b> {_line(exc)}</p>"
            return
        self._submissions_shown = key
        self.submissions_view.value = history.render_submissions(learner, lesson, exercise, record, kept)

    def _act(self, action) -> None:
        try:
            self.readout.value = esc(action(), longest=None)
        except EchoqError as exc:
            self.readout.value = fill("<b>Refused:</b> $why", why=_line(exc))
        except redis.RedisError as exc:
            self.readout.value = fill("<b>The class server did not answer:</b> $why", why=_line(exc))
        self.refresh()

    # -- refresh ---------------------------------------------------------------------------

    def refresh(self) -> BoardData | None:
        """Read the class and redraw; on any failure, say so on the page and keep the last
        picture's data (the next refresh tries again)."""
        try:
            data = self.board.read()
            page = render(data, chaos=False)
        except (EchoqError, redis.RedisError) as exc:
            self.view.value = fill("<p><b>The class server did not answer:</b> $why</p>", why=_line(exc))
            return None
        except Exception as exc:  # data the board could not read: report it, never stop refreshing
            self.view.value = fill(
                "<p><b>The dashboard could not read the class:</b> $kind: $why; it tries again every second.</p>",
                kind=type(exc).__name__,
                why=_line(exc),
            )
            return None
        self.last = data
        self.view.value = self._restarted() + page + (stale_banner() if self.live.value else "")
        self.chaos_view.value = render_chaos(data)
        self.watchdog_view.value = self._watchdog()
        if hasattr(self, "submissions_view"):
            self.show_submissions(force=False)
        return data

    def _restarted(self) -> Markup:
        """A banner when the class server was started again (`workshop restart`, `up`, the
        watchdog): the instructor's own doing, said as such, never as learners' refusals."""
        if self.folder is None:
            return Markup("")
        try:
            at = Workshop.load(self.folder).restarted_at
        except EchoqError:
            return Markup("")
        if not at:
            return Markup("")
        return fill(
            "<div class='echoq-restarted' role='status' style='background:#fff3cd;padding:6px 12px'>"
            "class server restarted at $at (local time, $zone; its users, scripts and limits in place before it "
            "took a connection; learners' workers reconnect by themselves)</div>",
            at=local_time(int(at * 1000)),
            zone=time_zone(),
        )

    def _watchdog(self) -> Markup:
        """The watchdog's last lines (watch.log): what a learner did to the class, and what was done."""
        if self.folder is None:
            return Markup("")
        events = last_events(self.folder, 8)
        if not events:
            return Markup("<h3>Watchdog</h3><p>Nothing to report (or no watchdog: `workshop up` starts one).</p>")
        lines = Markup("<br>".join(esc(line, longest=400) for line in events))
        return fill("<h3>Watchdog</h3><p><code>$lines</code></p>", lines=lines)

    def _loop(self) -> None:
        # The page's only clock: whatever one refresh meets, the next one still runs.
        while not self._closing.wait(self.refresh_s):
            if self.live.value:
                try:
                    self.refresh()
                except Exception:  # noqa: S110 - refresh reports on the page; this only keeps the loop alive
                    pass

    def close(self) -> None:
        self._closing.set()
        super().close()


def render_verified(rows: list[export.Row]) -> Markup:
    """Each submitted exercise: what the learner's kernel reported and the verified verdict,
    a disagreement first and in bold."""
    shown = sorted((r for r in rows if r.tries), key=lambda r: (not r.disagreement, r.learner, r.lesson, r.exercise))
    if not shown:
        return Markup("<p>No submission yet.</p>")
    cells = "".join(
        fill(
            "<tr><td>$name</td><td>$lesson $exercise</td><td>$status</td><td>$verified</td></tr>",
            name=r.name, lesson=r.lesson, exercise=r.exercise, status=r.status, verified=r.verified,
        ).replace("<td>", "<td style='font-weight:bold'>" if r.disagreement else "<td>")
        for r in shown
    )  # fmt: skip
    return Markup(
        "<table class='echoq-verified'><tr><th>learner</th><th>exercise</th><th>reported</th><th>verified</th></tr>"
        + cells
        + "</table>"
    )


def dashboard(folder: str | None = None, **kwargs: object) -> Dashboard | widgets.HTML:
    """The dashboard of the workshop in ``folder`` (default ``$ECHOQ_WORKSHOP``, else
    ``./echoq-workshop``); one line saying what to do when there is none."""
    try:
        workshop = Workshop.load(folder)
    except EchoqError as exc:
        return widgets.HTML(fill("<p><b>No workshop to show:</b> $why</p>", why=_line(exc)))
    return Dashboard.for_workshop(workshop, **kwargs)


class ClassWorkerPanel(widgets.VBox):
    """A learner's class-chaos worker and its readout, in words."""

    def __init__(self, worker: classroom.ClassWorker, refresh_s: float = 0.5) -> None:
        self.worker = worker
        self.readout = widgets.HTML()
        self.stop_button = widgets.Button(description="stop my worker")
        self.stop_button.on_click(lambda _b: threading.Thread(target=worker.stop, daemon=True).start())
        super().__init__([self.readout, self.stop_button])
        self._refresh_s = refresh_s
        self._tick = 0
        self.update()
        threading.Thread(target=self._loop, name="echoq-class-readout", daemon=True).start()

    STALE_S = 5

    def update(self) -> None:
        text = esc(self.worker.readout(), longest=None)
        if self.worker.state == "running":
            # While it runs, every update redraws a note that shows itself after STALE_S:
            # if the kernel dies or the hub restarts, the updates stop and the note says the
            # "running" above is old (CSS alone: nothing on the page needs the kernel).
            self._tick += 1
            text += (
                f"<span hidden>{self._tick}</span><style>@keyframes echoq-stale{{to{{visibility:visible}}}}</style>"
                "<div class='echoq-disconnected' style='visibility:hidden;color:#b00020;font-weight:600;"
                f"animation:echoq-stale 0s linear {self.STALE_S}s forwards'>No word from this notebook's kernel "
                f"for {self.STALE_S} s: it stopped, or the hub restarted -- the line above is old. "
                "Run the cell again.</div>"
            )
        self.readout.value = text
        self.stop_button.disabled = self.worker.state != "running"

    def _loop(self) -> None:
        while not self.worker.join(self._refresh_s):
            self.update()
        self.update()


_current: classroom.ClassWorker | None = None


def practice_alone() -> None:
    """The start of class chaos for a learner alone. In a workshop (``ECHOQ_CLASS`` and a
    ``VALKEY_URL``: the instructor runs the round) it stops, in one line, so "Run All" adds
    no second worker and no jobs to the class queue. Alone, it stops the worker
    :func:`class_worker` started in this kernel, so the practice runs with no hidden one."""
    import os

    one_line_errors()
    if os.environ.get("ECHOQ_CLASS") and os.environ.get("VALKEY_URL"):
        raise InvalidArgument(
            "this part is for learners alone, and you are in a workshop: your worker above is all you need "
            "(the instructor produces the jobs and orders the kills); Run All stops here on purpose"
        )
    if _current is not None and _current.state == "running":
        _current.stop()


def class_worker(**kwargs: object) -> ClassWorkerPanel | widgets.HTML:
    """THE one cell of class chaos: start this learner's worker on the class queue (a
    worker this kernel already runs is stopped first), and show what it does."""
    global _current
    one_line_errors()
    if _current is not None and _current.state == "running":
        _current.stop()
    try:
        _current = classroom.ClassWorker(**kwargs).start()
    except EchoqError as exc:
        return widgets.HTML(fill("<b>Could not start the class worker:</b> $why", why=_line(exc)))
    return ClassWorkerPanel(_current)
