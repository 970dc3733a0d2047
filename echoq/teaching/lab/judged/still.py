"""The still picture of a rejected answer: drawn once, as a PNG with its alt text (the ✗
line's own words), and as the ``<img>`` that carries both."""

from __future__ import annotations

import base64
import html
from typing import Any

from .figure import figure_for
from .model import Picture, picture

__all__ = ["Still", "image"]


class Still:
    """The picture of one feedback, drawn once: its PNG and alt text."""

    def __init__(self, feedback: Any, step: int | None = None) -> None:
        self.picture: Picture = picture(feedback, step)
        self.figure = figure_for(self.picture)
        with self.figure.lock:
            self.figure.show(self.picture)
            self.png = self.figure.png()
        self.width = int(self.figure.fig.bbox.width)

    @property
    def alt(self) -> str:
        return self.picture.alt

    def img(self) -> str:
        return image(self.png, self.alt, self.width)


def image(png: bytes, alt: str, width: int) -> str:
    """An ``<img>`` carrying the picture and its alt text, as wide as drawn at most."""
    data = base64.b64encode(png).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" width="{width}" style="max-width:100%"/>'
