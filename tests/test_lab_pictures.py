"""Every frame of every panel, in a scripted tour (tests/support/lab_tour.py): no two texts of the
picture overlap, none is cut off by the figure's edge, a card's text stays in its card, a lit
arrow crosses no text, and every key's label shows the queue's name whole, wrapped where its
box is narrow -- with a learner's queue name on the hub (``katherine-johnson-na-98c47aa3.…``),
the longest a lab draws."""

from __future__ import annotations

import json

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
        # Every key names the queue whole (over as many lines as its box needs).
        keys = [t.get_text().replace("\n", "") for t in lab.figure.marks if t.get_text().startswith("emq:")]
        assert len(keys) >= 3 and all(k.startswith(f"emq:{{{name}") for k in keys), keys
    finally:
        lab.close()
        if hasattr(lab.model, "shutdown"):
            lab.model.shutdown()
        for suffix in ("", "-fence", "-racy", "-atomic"):
            echoq.Queue(name + suffix, valkey_client).reset()


def widest(title) -> None:
    """Fill a title with words until it spans nine tenths of its figure's width."""
    renderer = title.figure.canvas.get_renderer()
    words = ["crash mid-job"]
    while title.get_window_extent(renderer).width < 0.9 * title.figure.bbox.width:
        words.append("lease 10.0 s")
        title.set_text(" · ".join(words))


@pytest.mark.parametrize("panel", list(TOURS), ids=lambda p: p.__name__)
def test_every_key_names_its_queue_whole_on_as_many_lines_as_its_box_needs(panel: type[LabPanel]) -> None:
    hub = "katherine-johnson-na-98c47aa3.lesson-02-lab"
    for queue in ("q7", hub):  # the shortest name, and the longest a lab draws (the tour has lesson names)
        lab = panel(queue, live=False, animate=False)  # no I/O: the figure is built from the name
        keys = [t for t in lab.figure.marks if t.get_text().startswith("emq:")]
        for key in keys:
            lines = key.get_text().splitlines()
            assert "".join(lines).startswith(f"emq:{{{queue}}}:"), lines  # the name whole, nothing cut
        if queue == "q7":
            assert keys and all("\n" not in k.get_text() for k in keys)  # room enough: one line each
        if queue == hub:
            assert any(k.get_text().count("\n") >= 2 for k in keys)  # wrapped, not cut
        widest(lab.figure.title)  # a title as wide as the picture, under which the headers sit
        assert not [c for c in collisions(lab.figure) if "overlap" in c or "clipped" in c], queue
        lab.close()


def test_the_pictures_and_alt_text_in_docs_are_what_the_code_draws_of_their_frames_now() -> None:
    """tools/render_docs.py keeps the frames it drew (docs/data/pictures.json); drawn again
    by today's code, each gives the committed PNG byte for byte and its line in docs/lab.md.
    A change to how a lab draws or words a frame fails here until `render_docs.py --redraw`."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("render_docs", root / "tools" / "render_docs.py")
    assert spec and spec.loader
    render_docs = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("render_docs", render_docs)
    spec.loader.exec_module(render_docs)
    recorded = json.loads(render_docs.RECORD.read_text())
    assert {"lab-claim.png", "lab-fence.png", "lab-race-grid.png"} <= set(recorded)
    drawn = []
    for name, facts in recorded.items():
        png, alt = render_docs.draw(name, facts)
        assert png == (render_docs.DOCS / name).read_bytes(), f"docs/{name} is not what the code draws now"
        drawn.append((name, alt))
    page = (render_docs.DOCS / "lab.md").read_text()
    assert render_docs.BEGIN + "\n" + render_docs.lines(drawn) + render_docs.END in page
