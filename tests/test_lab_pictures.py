"""Every frame of every panel, in a scripted tour (tests/support/lab_tour.py): no two texts of the
picture overlap, none is cut off by the figure's edge, a card's text stays in its card, a lit
arrow crosses no text, and every key's label shows the queue's name whole -- with a
learner's queue name on the hub (``katherine-johnson-na-98c47aa3.…``), the longest a lab draws."""

from __future__ import annotations

import matplotlib
import pytest
import redis

matplotlib.use("Agg")

import echoq  # noqa: E402
from echoq.teaching.lab.view import LabPanel  # noqa: E402
from tests.support.lab_tour import TOURS, tour  # noqa: E402
from tests.support.pictures import collisions  # noqa: E402
from tests.support.servers import fresh_name  # noqa: E402

HUB_USER = "Katherine.Johnson@nasa.gov"  # on the hub: the namespace katherine-johnson-na-98c47aa3


@pytest.mark.parametrize("panel", list(TOURS), ids=lambda p: p.__name__)
def test_no_text_collides_or_is_clipped_in_any_frame_of_a_tour(
    panel: type[LabPanel], valkey_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
):
    # The longest names a lab draws: a learner's on the hub (a short name only makes room).
    monkeypatch.delenv("ECHOQ_LEARNER", raising=False)
    monkeypatch.setenv("JUPYTERHUB_USER", HUB_USER)
    lab, steps = tour(panel, fresh_name("pictures"), valkey_client)
    name = lab.model.name
    try:
        for _ in steps:
            pass
        problems: list[str] = []
        frames = lab.model.history.all()
        for a, b in zip([None, *frames], frames, strict=False):
            # each frame at rest, and its move's animation a fifth, half and four fifths in
            for p in (1.0,) if a is None else (0.2, 0.5, 0.8, 1.0):
                with lab.figure.lock:
                    lab.figure.pose(a, b, p)
                    problems += [f"frame {b.index} ({b.move}) at {p}: {x}" for x in collisions(lab.figure)]
        assert not problems, "\n".join(problems[:12])
        # Every key names the queue whole, or names it q and the line under the title says what q is.
        keys = [line for t in lab.figure.marks for line in t.get_text().splitlines() if line.startswith("emq:")]
        assert len(keys) >= 3 and (
            all(f"emq:{{{name}}}:" in k for k in keys)
            or (all(k.startswith("emq:{q}:") for k in keys) and lab.figure.subtitle.get_text() == f"queue q = {name}")
        ), keys
    finally:
        lab.close()
        if hasattr(lab.model, "shutdown"):
            lab.model.shutdown()
        for suffix in ("", "-fence", "-racy", "-atomic"):
            echoq.Queue(name + suffix, valkey_client).reset()


@pytest.mark.parametrize("panel", list(TOURS), ids=lambda p: p.__name__)
def test_a_key_names_its_queue_whole_where_every_key_has_room_and_q_where_one_has_not(panel: type[LabPanel]) -> None:
    for queue in ("q7", "katherine-johnson-na-98c47aa3.lesson-02-lab"):
        lab = panel(queue, live=False, animate=False)  # no I/O: the figure is built from the name
        keys = [t.get_text().split(" ·")[0] for t in lab.figure.marks if t.get_text().startswith("emq:")]
        if queue == "q7":
            assert keys and all(k.startswith("emq:{q7}:") for k in keys), keys
        else:
            assert keys and all(k.startswith("emq:{q}:") for k in keys), keys
        assert lab.figure.subtitle.get_text() == f"queue q = {queue}"
        lab.close()
