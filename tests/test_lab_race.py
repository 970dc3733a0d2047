"""The race explorer: every interleaving of two reapers' commands and a worker's claim, run
on the live server from a fresh state each time. The two-step reaper's duplicating
interleavings are found and each one, played again, ends as it did; the atomic reap.lua
is one command and no interleaving of it goes wrong."""

from __future__ import annotations

from collections.abc import Iterator
from math import comb

import matplotlib
import pytest
import redis

matplotlib.use("Agg")

import echoq  # noqa: E402
from echoq.teaching.lab import RaceLab  # noqa: E402
from echoq.teaching.lab.race import COMMANDS, Exploration, explore, interleavings  # noqa: E402
from echoq.teaching.lab.race.figure import LOOK, cell_at, grid  # noqa: E402
from echoq.teaching.lab.race.words import grid_alt  # noqa: E402
from tests.support.servers import fresh_name  # noqa: E402


@pytest.mark.parametrize("reaper", list(COMMANDS))
def test_every_interleaving_is_listed_once_each_actor_in_its_own_order(reaper: str) -> None:
    orders = interleavings(reaper)
    n = len(COMMANDS[reaper])
    assert len(orders) == len(set(orders)) == comb(2 * n + 1, n) * (n + 1)  # (2n+1)! / (n! n! 1!)
    for order in orders:
        for actor, commands in (("A", COMMANDS[reaper]), ("B", COMMANDS[reaper]), ("W", ("claim.lua",))):
            assert tuple(s.command for s in order if s.actor == actor) == commands


@pytest.fixture(scope="module")
def explored() -> Iterator[tuple[echoq.Queue, dict[str, Exploration]]]:
    """Both explorations, once for the module (the two-step one sends about 8,000 commands)."""
    conn = echoq.connect()
    queue = echoq.Queue(fresh_name("race"), conn)
    yield queue, {reaper: explore(queue, reaper) for reaper in COMMANDS}
    queue.reset()
    conn.close()


@pytest.mark.server
def test_the_two_step_reaper_duplicates_in_some_interleavings_and_the_atomic_one_in_none(explored) -> None:
    queue, ex = explored
    two_step, atomic = ex["two-step"].counts(), ex["atomic"].counts()
    assert atomic == {"once": 6, "duplicated": 0, "dead-lettered": 0, "late": 0, "lost": 0}
    assert sum(two_step.values()) == 630 and two_step["duplicated"] > 0
    # Where no worker got the job, the claim dead-lettered it (the gap between ZADD and HSET):
    # it rests in the dead set, not lost.
    assert two_step["dead-lettered"] > 0 and two_step["late"] == two_step["lost"] == 0
    assert {run.place for run in ex["two-step"].runs if run.outcome == "dead-lettered"} == {"dead"}
    # Sweeps that do not overlap each other or the claim never go wrong.
    for run in ex["two-step"].runs:
        actors = "".join(s.actor for s in run.order)
        if actors.strip("W") in ("AAAABBBB", "BBBBAAAA"):
            assert run.outcome == "once", [str(s) for s in run.order]
    assert queue.snapshot().counts == {"pending": 0, "active": 0, "scheduled": 0, "dead": 0, "done": 0}


@pytest.mark.server
def test_each_duplicating_interleaving_played_again_ends_as_it_did(explored) -> None:
    queue, ex = explored
    from echoq.teaching.lab.race.model import run_one

    runs = ex["two-step"].runs
    for k in [k for k, run in enumerate(runs) if run.outcome != "once"][:10]:
        again = run_one(queue, runs[k].order)
        assert (again.outcome, again.deliveries, again.place) == (runs[k].outcome, runs[k].deliveries, runs[k].place)
    queue.reset()


@pytest.mark.server
def test_the_grid_has_a_cell_per_interleaving_marked_by_its_outcome(explored) -> None:
    _queue, ex = explored
    two_step = ex["two-step"]
    fig = grid(two_step)
    ax = fig.axes[0]
    cells = {c.get_label(): [tuple(xy) for xy in c.get_offsets()] for c in ax.collections if c.get_label() in LOOK}
    counts = two_step.counts()
    assert {outcome: len(xys) for outcome, xys in cells.items()} == {o: n for o, n in counts.items() if n}
    assert sum(len(xys) for xys in cells.values()) == len({xy for xys in cells.values() for xy in xys}) == 630
    k = two_step.first("duplicated")
    x, y = cells["duplicated"][0]
    assert cell_at(two_step, x + 0.3, y - 0.3) == k  # a click on the cell picks it
    assert f"#{k + 1}" in grid_alt(two_step) and "duplicated" in grid_alt(two_step)


def test_the_panel_plays_a_duplicating_interleaving_command_by_command(valkey_client: redis.Redis) -> None:
    name = fresh_name("race-lab")
    lab = RaceLab(name, client=valkey_client, live=False, animate=False)
    try:
        lab.play_first("duplicated")  # before any exploration: refused in the readout
        assert "run every interleaving" in lab.readout.value
        lab.explore_button.click()
        ex = lab.model.exploration
        assert "630 interleavings run" in lab.readout.value and "img" in lab.grid_view.value
        before = lab.model.history.last_index
        lab.first_bad_button.click()
        k = ex.first("duplicated")
        frames = lab.model.history.all()[before + 1 - lab.model.history.first_index :]
        order = ex.runs[k].order
        assert len(frames) == len(order) + 2 and lab.pick.value == k + 1
        assert [f.readout.split(":")[0] for f in frames[1:-1]] == [str(s).split(":")[0] for s in order]
        last = frames[-1]
        assert "Outcome: duplicated" in last.readout
        [job] = last.snapshot.active  # two workers think they hold it; the server has it once, in active
        assert last.snapshot.rows[job].attempts == 3  # the crashed worker, W, and the last one
        lab.pick.value = 700
        assert lab.pick.value == 630  # the box stops at the last interleaving
    finally:
        echoq.Queue(lab.model.name, valkey_client).reset()
        lab.close()


def test_a_learners_two_step_reaper_races_cut_at_its_two_calls(valkey_client: redis.Redis) -> None:
    from echoq.teaching.exercises import EXERCISES

    space: dict = {}
    exec(EXERCISES["two_step"].solution, space)  # the exercise's reference answer, as a learner writes it
    name = fresh_name("race-yours")
    lab = RaceLab(name, client=valkey_client, live=False, animate=False)
    try:
        lab.reaper_picker.value = "atomic"
        assert "yours" not in lab.reaper_picker.options
        lab.use(space["read_expired"], space["move_back"])
        assert lab.reaper_picker.value == "yours"
        ex = lab.model.explore()
        assert len(ex.runs) == 30 and ex.counts()["duplicated"] > 0  # (2+2+1)! / (2! 2! 1!)
        k = ex.first("duplicated")
        run = lab.model.replay(k)
        assert run is not None and run.outcome == "duplicated"
        assert "Outcome: duplicated" in lab.model.frame.readout

        def broken(r, keys, ids):
            raise RuntimeError("oops")

        lab.use(space["read_expired"], broken)
        assert lab.model.explore() is None
        assert "your move_back() raised RuntimeError: oops" in lab.model.frame.readout  # a line, no traceback
    finally:
        echoq.Queue(name, valkey_client).reset()
        lab.close()


@pytest.mark.server
def test_a_job_the_next_reap_brings_back_is_late_not_lost(explored) -> None:
    """Reapers that move nothing (the lesson's stub) leave the job in active under its
    expired lease: late, since the next reap brings it back, never "lost"."""
    from echoq.teaching.lab.race import words
    from echoq.teaching.lab.race.model import run_one

    queue, _ex = explored

    def read_expired(_client, _keys):
        return []

    def move_back(_client, _keys, _ids):
        return None

    runs = [run_one(queue, order, mine=(read_expired, move_back)) for order in interleavings("yours")]
    assert {(run.outcome, run.place) for run in runs} == {("late", "active")}
    assert "not lost" in words.outcome(runs[-1]) and "next reap" in words.outcome(runs[-1])
    assert queue.reap() and queue.claim() is not None  # the next reap brings it back: a worker gets it
    queue.reset()
