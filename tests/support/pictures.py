"""What a drawn picture must never do, checked on any figure of the kit (a lab panel's, a
rejected answer's): no two texts overlap, none is cut off by the figure's edge, a card's text
stays in its card, an arrow crosses no text."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.path import Path
from matplotlib.transforms import Bbox

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
        around = outline.get_extents()
        for text, box in drawn:
            near = Bbox.from_extents(box.x0 - reach, box.y0 - reach, box.x1 + reach, box.y1 + reach)
            if not near.overlaps(around):  # far from the whole arrow: no segment of it can cross
                continue
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
    if len(drawn) > 1:  # every pair at once: a text's box against every other's
        x0, y0, x1, y1 = np.array([(b.x0, b.y0, b.x1, b.y1) for _t, b in drawn]).T
        w = np.minimum.outer(x1, x1) - np.maximum.outer(x0, x0)
        h = np.minimum.outer(y1, y1) - np.maximum.outer(y0, y0)
        for i, j in zip(*np.nonzero(np.triu((w > SLACK_PX) & (h > SLACK_PX), k=1)), strict=True):
            found.append(f"overlap: {drawn[i][0]!r} and {drawn[j][0]!r}")
    return found
