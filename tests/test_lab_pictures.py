"""Every frame of every panel, in a scripted tour (tests/support/lab_tour.py): no two texts of the
picture overlap, none is cut off by the figure's edge, a card's text stays in its card, a lit
arrow crosses no text, and every key's label shows the queue's name whole, wrapped where its
box is narrow -- with a learner's queue name on the hub (``katherine-johnson-na-98c47aa3.…``),
the longest a lab draws."""

from __future__ import annotations

import itertools
import json

import matplotlib
import pytest
import redis
from matplotlib.path import Path
from matplotlib.transforms import Bbox

matplotlib.use("Agg")

import echoq  # noqa: E402
from echoq.teaching.lab.view import LabPanel  # noqa: E402
from tests.support.lab_tour import TOURS, tour  # noqa: E402
from tests.support.servers import fresh_name  # noqa: E402

SLACK_PX = 1.0  # anti-aliasing: boxes that touch by less than a pixel do not collide


def texts_drawn(figure) -> list[tuple[str, object]]:
    """The visible, non-empty texts of the figure with their boxes on the canvas."""
    fig = figure.fig
    renderer = fig.canvas.get_renderer()
    out = []
    for text in fig.findobj(matplotlib.text.Text):
        if not text.get_visible() or not text.get_text().strip():
            continue
        if text.get_alpha() is not None and text.get_alpha() <= 0.02:
            continue
        out.append((text.get_text(), text.get_window_extent(renderer)))
    return out


def arrows_over_text(figure, drawn) -> list[str]:
    """Each arrow (lit or not) against each text: the arrow's line must not cross it."""
    found = []
    for name, arrow in figure.arrows.items():
        outline = arrow.get_transform().transform_path(arrow.get_path())  # in pixels, the head's outline too
        lines = [Path(p) for p in outline.to_polygons(closed_only=False)]
        reach = arrow.get_linewidth() * figure.dpi / 72 / 2  # half the line's width, in pixels
        for text, box in drawn:
            near = Bbox.from_extents(box.x0 - reach, box.y0 - reach, box.x1 + reach, box.y1 + reach)
            if any(line.intersects_bbox(near, filled=False) for line in lines):
                found.append(f"arrow {name!r} ({'lit' if arrow.get_linewidth() > 2 else 'dim'}) over {text!r}")
    return found


def collisions(figure) -> list[str]:
    drawn = texts_drawn(figure)
    found = arrows_over_text(figure, drawn)
    page = figure.fig.bbox
    for text, box in drawn:
        if (
            box.x0 < page.x0 - SLACK_PX
            or box.y0 < page.y0 - SLACK_PX
            or box.x1 > page.x1 + SLACK_PX
            or (box.y1 > page.y1 + SLACK_PX)
        ):
            found.append(f"clipped: {text!r}")
    for (x0, y0, x1, _y1), card in figure.cards:
        if not card.get_text().strip():
            continue
        box = card.get_window_extent(figure.fig.canvas.get_renderer())
        w, h = page.width, page.height
        if box.x0 < x0 * w - SLACK_PX or box.x1 > x1 * w + SLACK_PX or box.y0 < y0 * h - SLACK_PX:
            found.append(f"runs out of its card: {card.get_text()!r}")
    for (a, box_a), (b, box_b) in itertools.combinations(drawn, 2):
        w = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        h = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if w > SLACK_PX and h > SLACK_PX:
            found.append(f"overlap: {a!r} and {b!r}")
    return found


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
