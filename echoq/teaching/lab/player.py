"""Plays a panel's recorded frames on its figure: each new frame animated in, or any
recorded frame held still (time control, as in RaftScope). No widgets here.

* **Following** (live): every new frame is animated in: the markers travel from set to
  set in ``figure.steps`` frames over ``figure.transition_s`` seconds (divided by
  ``speed``). The first frame is drawn at once, on the thread that recorded the move (so a
  click shows something within one frame); a short-lived thread draws the rest and exits
  when the picture has caught up. Nothing runs while idle.
* **Never behind**: the picture shows each frame within ``LAG_S`` of its recording. When
  moves come faster than they can be drawn (a cell drove the panel, or the Fleet's
  samples), the picture jumps from what it shows straight to the newest frame, in a move
  shortened to fit what is left of that second; a move already playing is cut short when
  finishing it would make the newest frame late. The frames jumped over stay on the
  timeline, and :meth:`Player.replay` plays them afterwards. (Speeds below 1× are slow
  motion the learner chose: a move then takes ``transition_s / speed``.)
* **Held** (paused, stepped, scrubbed): the figure shows one recorded frame, read-only;
  new frames are still recorded; :meth:`Player.step` animates to the next one,
  :meth:`Player.live` returns to the present.

Drawing stays under ``figure.lock``; the model's history is only read.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from .figure import BoardFigure
from .frames import Frame, History

__all__ = ["LAG_S", "Player", "Transition"]

LAG_S = 1.0  # the picture shows a recorded frame at most this long after it was recorded ...
AIM_S = 0.75  # ... so it aims at this, leaving room for frames drawn late on a loaded machine
MIN_MOVE_S = 0.3  # a catch-up move still travels for this long: a jump the eye can follow


@dataclass
class Transition:
    """One animated move, as drawn: for the latency bench and the tests."""

    to_index: int
    started: float  # perf_counter when the move's animation began
    first: float = 0.0  # perf_counter when its first frame had been drawn and published
    ended: float = 0.0  # ... and its last
    drawn: float = 0.0  # perf_counter when the latest frame's drawing began
    frames: int = 0
    period: float = 0.0  # seconds between its frames
    still: bool = False  # nothing moved (a setting, a refusal that lit no path): shown in one frame
    told: bool = False  # the readout shows the move's new frame (from the half-way frame on)
    skipped: int = 0  # recorded frames jumped over to reach this one (the picture was behind)
    cut: bool = False  # ended early: a newer frame would have been late
    steps: int = 0  # the frames this move was to play (fewer for a shortened catch-up)

    @property
    def seconds(self) -> float:
        return self.ended - self.started


class Player:
    def __init__(
        self,
        history: History,
        figure: BoardFigure,
        *,
        publish: Callable[[Frame], None],
        can_draw: Callable[[], bool],
        shown: Callable[[Frame, bool], None],
        animate: bool = True,
    ) -> None:
        self.history, self.figure = history, figure
        self._publish, self._can_draw, self._shown = publish, can_draw, shown
        self.animate = animate
        self.speed = 1.0
        self.following = True
        self.cursor = -1  # index of the frame shown (or being animated to)
        self.transitions: list[Transition] = []
        self._state = threading.Lock()
        self._running = False
        self._abort = threading.Event()
        self._closed = threading.Event()
        self._step_to: int | None = None
        self._replay_to: int | None = None  # replaying: held, playing each frame up to this one
        self.jumped: tuple[int, int] | None = None  # the last frames jumped over (first, last), for replay
        self._thread: threading.Thread | None = None
        _players.add(self)

    # -- what the view calls ---------------------------------------------------------------

    def notify(self) -> None:
        """New frames were recorded: animate them in (when following)."""
        if not self.following:
            self._shown(self._frame(self.cursor) or self.history.latest(), True)  # type: ignore[arg-type]
            return
        self._kick()

    def pause(self) -> None:
        """Hold the picture still; a running animation ends at its move's last frame."""
        self.following = False
        self._replay_to = None
        self._abort.set()
        self._wait_stopped()
        self._abort.clear()
        self._show_at_rest(self.cursor)

    def step(self) -> bool:
        """Hold, then animate one recorded move forward; False if there is none."""
        if self.following:
            self.pause()
        if self.cursor >= self.history.last_index:
            self._show_at_rest(self.cursor)
            return False
        self._step_to = self.cursor + 1
        self._kick()
        return True

    def show(self, index: int) -> None:
        """Hold the picture at recorded frame ``index`` (scrubbing the timeline)."""
        index = max(self.history.first_index, min(index, self.history.last_index))
        self.following = False
        self._replay_to = None
        self._abort.set()
        self._wait_stopped()
        self._abort.clear()
        self.cursor = index
        self._show_at_rest(index)

    def live(self) -> None:
        """Follow the present again, at once: the latest frame is drawn at rest (replaying
        the moves recorded while held would show the past with the moves already enabled)."""
        self._abort.set()
        self._wait_stopped()
        self._abort.clear()
        self._step_to = self._replay_to = None
        self.following = True
        self._show_at_rest(self.history.last_index)
        self._kick()  # anything recorded since is animated as usual

    def replay(self) -> bool:
        """Play the frames the picture last jumped over, one move after another, held
        (read-only), then follow the present again. False if it jumped over none."""
        if self.jumped is None:
            return False
        first, last = self.jumped
        return self.play(first, last + 1)  # the frame the jump landed on ends the replay

    def play(self, first: int, last: int) -> bool:
        """Hold the picture at the frame before ``first``, play every recorded move up to
        ``last`` one after another (read-only), then follow the present again."""
        if self.history.get(first - 1) is None or self.history.get(last) is None:
            return False
        self.show(first - 1)
        self._replay_to = last
        self._kick()
        return True

    @property
    def replaying(self) -> bool:
        return self._replay_to is not None

    def tick(self) -> None:
        """The browser's clock: redraw the latest frame at the server's estimated now, so
        lease deadlines count down. No I/O; nothing to do unless a lease is running."""
        if not self.following or self._running or self.cursor != self.history.last_index:
            return
        frame = self.history.latest()
        if frame is None or not self._can_draw() or not self.figure.time_dependent(frame):
            return
        self.figure.draw(frame, at_s=time.monotonic())
        self._publish(frame)

    def settle(self, timeout_s: float = 30.0) -> bool:
        """Wait until the picture has caught up (or is held) and the animation thread has
        said so (its readout and controls are set just after it stops running); False at
        the deadline."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._state:
                idle = not self._running
            if idle and (not self.following or self.cursor >= self.history.last_index):
                thread = self._thread
                if thread is None or thread is threading.current_thread():
                    return True
                thread.join(max(0.0, deadline - time.monotonic()))
                return not thread.is_alive()
            time.sleep(0.005)  # polling a flag another thread sets; bounded by the deadline
        return False

    def close(self) -> None:
        self._closed.set()
        self._abort.set()

    @property
    def running(self) -> bool:
        return self._running

    # -- the animation ---------------------------------------------------------------------

    def _frame(self, index: int) -> Frame | None:
        return self.history.get(index) if index >= 0 else None

    def _next(self) -> tuple[Frame | None, Frame, int] | None:
        """The next move to animate: (from, to, frames jumped over), or None when caught up.
        Following, the move goes from the frame shown straight to the newest one."""
        last = self.history.last_index
        if self._step_to is not None:
            target = min(self._step_to, last)
            self._step_to = None
            if target <= self.cursor:
                return None
            return self._frame(self.cursor), self._frame(target), 0  # type: ignore[return-value]
        if self._replay_to is not None:
            if self.cursor >= min(self._replay_to, last):
                return None
            return self._frame(self.cursor), self._frame(self.cursor + 1), 0  # type: ignore[return-value]
        if not self.following or self.cursor >= last:
            return None
        skipped = last - self.cursor - 1 if self.cursor >= 0 else 0
        if skipped:
            self.jumped = (self.cursor + 1, last - 1)
        return self._frame(self.cursor), self._frame(last), skipped  # type: ignore[return-value]

    def _nothing_next(self) -> bool:
        last = self.history.last_index
        if self._step_to is not None:
            return self._step_to <= self.cursor
        if self._replay_to is not None:
            return self.cursor >= min(self._replay_to, last)
        return not self.following or self.cursor >= last

    def _kick(self) -> None:
        with self._state:
            if self._running or self._closed.is_set():
                return
            move = self._next()
            if move is None:
                return
            self._running = True
        a, b, skipped = move
        if not self._can_draw() or not self.animate:
            self._finish_without_animation(a, b)
            return
        transition = self._begin(a, b, skipped)  # the first frame, now, on the caller's thread
        self._thread = threading.Thread(target=self._run, args=(a, b, transition), daemon=True, name="echoq-lab-player")
        self._thread.start()

    def _finish_without_animation(self, _a: Frame | None, b: Frame) -> None:
        # No browser view to draw for (or animation off): show where things are now.
        while True:
            self.cursor = self.history.last_index if self.following and self._replay_to is None else b.index
            frame = self._frame(self.cursor) or b
            if self._can_draw():
                self.figure.draw(frame)
                self._publish(frame)
            self._shown(frame, True)
            with self._state:
                if self._replay_to is not None:
                    self._end_replay()
                if not self.following or self.cursor >= self.history.last_index:
                    self._running = False
                    return

    def _begin(self, a: Frame | None, b: Frame, skipped: int = 0) -> Transition:
        transition = Transition(b.index, time.perf_counter(), skipped=skipped)
        self.transitions = self.transitions[-199:] + [transition]
        with self.figure.lock:
            transition.still = not self.figure.moves(a, b)
        # The readout tells the frame the picture's words show: the move's old frame until
        # the half-way frame draws the new one's (see BoardFigure.pose).
        transition.told = transition.still or a is None
        self._shown(b if transition.told else a, False)  # type: ignore[arg-type]
        if transition.still:
            self._draw(a, b, 1.0, transition)
        else:
            transition.steps, transition.period = self._schedule(b)
            self._draw(a, b, 1 / (transition.steps - 1), transition)
        return transition

    def _schedule(self, b: Frame) -> tuple[int, float]:
        """How many frames the move to ``b`` plays, and how far apart: the whole animation,
        or, when that would show ``b`` later than ``AIM_S`` after it was recorded, one
        shortened to what is left (never under ``MIN_MOVE_S``), with fewer frames."""
        steps = max(2, self.figure.steps)
        whole = self.figure.transition_s / max(self.speed, 0.05)
        if self._following_present():
            left = b.at_s + max(AIM_S, whole) - time.monotonic()
            if left < whole:
                seconds = max(MIN_MOVE_S, left)
                steps = max(6, min(steps, round(steps * seconds / whole)))
                return steps, seconds / (steps - 1)
        return steps, whole / (steps - 1)

    def _following_present(self) -> bool:
        return self.following and self._step_to is None and self._replay_to is None

    def _late(self, b: Frame, transition: Transition) -> bool:
        """True if finishing this move would show a newer recorded frame late."""
        if not self._following_present() or self.history.last_index <= b.index:
            return False
        newest = self.history.latest()
        if newest is None:
            return False
        left = transition.started + (transition.steps - 1) * transition.period - time.perf_counter()
        return time.monotonic() + max(left, 0.0) + MIN_MOVE_S > newest.at_s + AIM_S

    def _draw(self, a: Frame | None, b: Frame, p: float, transition: Transition) -> None:
        transition.drawn = time.perf_counter()
        self.figure.draw_between(a, b, p, at_s=time.monotonic())
        if not transition.told and (a is None or p >= 0.5):
            transition.told = True
            self._shown(b, False)
        self._publish(b)
        transition.frames += 1
        transition.ended = time.perf_counter()
        if transition.frames == 1:
            transition.first = transition.ended

    def _run(self, a: Frame | None, b: Frame, transition: Transition) -> None:
        try:
            while True:
                self._play(a, b, transition)
                self.cursor = b.index
                with self._state:
                    settled = self._closed.is_set() or self._nothing_next()
                if settled:
                    self._shown(b, True)  # the readout says the picture has caught up
                with self._state:
                    move = None if self._closed.is_set() else self._next()
                    replayed = move is None and self._replay_to is not None and not self._closed.is_set()
                    if replayed:
                        self._end_replay()
                        move = self._next()
                    if move is None:
                        self._running = False
                if move is None:
                    if replayed:
                        self._shown(b, True)  # live again: the readout says so
                    return
                a, b, skipped = move
                transition = self._begin(a, b, skipped)
        except Exception:
            with self._state:
                self._running = False
            raise

    def _end_replay(self) -> None:
        # The replay reached the frame the jump landed on: follow the present again (called
        # under self._state, by the animation thread).
        self._replay_to = None
        self.jumped = None
        self.following = True

    def _play(self, a: Frame | None, b: Frame, transition: Transition) -> None:
        if transition.still:
            return
        steps, period = transition.steps, transition.period
        for k in range(2, steps + 1):
            # Paced by the clock; a frame that comes late is still drawn (never skipped), so
            # every move shows all its frames even on a loaded machine, and never sooner than
            # nearly a period after the last one (a browser drops an image that is replaced
            # before it loads: frames sent in a burst would be lost).
            now = time.perf_counter()
            delay = max(transition.started + (k - 1) * period - now, transition.drawn + 0.9 * period - now)
            if delay > 0 and self._abort.wait(delay):
                break
            if self._abort.is_set():
                break
            if self._late(b, transition):
                transition.cut = True  # the next move starts from here, towards the newest frame
                return
            self._draw(a, b, (k - 1) / (steps - 1), transition)
        if self._abort.is_set() or transition.frames < steps:
            self._draw(a, b, 1.0, transition)

    def _wait_stopped(self) -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._state:
                if not self._running:
                    return
            time.sleep(0.002)  # the animation thread ends within one frame of the abort

    def _show_at_rest(self, index: int) -> None:
        frame = self._frame(index) or self.history.latest()
        if frame is None:
            return
        self.cursor = frame.index
        if self._can_draw():
            self.figure.draw(frame, at_s=None if not self.following else time.monotonic())
            self._publish(frame)
        self._shown(frame, True)


_players: weakref.WeakSet[Player] = weakref.WeakSet()


@atexit.register
def _stop_animations() -> None:
    # A daemon thread killed inside matplotlib's C++ at exit aborts the interpreter noisily.
    for player in list(_players):
        player.close()
        thread = player._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout=2)
