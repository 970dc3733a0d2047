"""How the lab looks: one colour and one marker shape per place a job can be, text sizes,
and the colour checks behind them. No matplotlib and no widgets here: plain numbers.

Colours are the Okabe-Ito palette (Okabe & Ito, *Color Universal Design*, 2008), chosen to
stay apart under the common forms of colour blindness; every place also has its own
marker shape and its own name on the figure, so colour is never the only cue.
:func:`simulate` applies Machado et al. (2009) to check the palette under protanopia,
deuteranopia and tritanopia (``tests/test_lab.py`` does).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "OKABE_ITO",
    "PLACES",
    "PlaceStyle",
    "INK",
    "MUTED",
    "PAPER",
    "FONT",
    "TITLE",
    "FEEDBACK",
    "contrast",
    "simulate",
    "delta_e",
]

OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermilion": "#D55E00",
    "purple": "#CC79A7",
}

INK = "#1a1a1a"  # text on the figure's white paper: 17:1
MUTED = "#595959"  # secondary text on white: 7:1
PAPER = "#ffffff"
FONT = 10  # the smallest text on any lab figure, in points
TITLE = 12


@dataclass(frozen=True)
class PlaceStyle:
    """How a job marker is drawn while it is in one place."""

    name: str
    colour: str
    marker: str  # a matplotlib marker: a distinct shape per place
    words: str  # the place in a few words, for legends and alt text


PLACES: dict[str, PlaceStyle] = {
    "pending": PlaceStyle("pending", OKABE_ITO["blue"], "o", "waiting to be claimed"),
    "active": PlaceStyle("active", OKABE_ITO["orange"], "s", "leased to a worker, at its lease deadline"),
    "done": PlaceStyle("done", OKABE_ITO["green"], "^", "completed"),
    "dead": PlaceStyle("dead", OKABE_ITO["vermilion"], "X", "dead-lettered"),
    "scheduled": PlaceStyle("scheduled", OKABE_ITO["purple"], "D", "waiting out a retry backoff"),
    # Not places on the server: a naive worker's job lives only in its memory, and a lost job nowhere.
    "held": PlaceStyle("held", OKABE_ITO["sky"], "P", "only in a worker's memory (popped)"),
    "lost": PlaceStyle("lost", OKABE_ITO["black"], "x", "lost: no copy anywhere"),
    # A script on its way (a fenced complete), not a job.
    "request": PlaceStyle("request", OKABE_ITO["black"], "$\u2192$", "a call to the server"),
}

# Readout feedback: text on its own background, so the pair reads the same in a light and
# a dark notebook theme (a bare coloured word cannot reach 4.5:1 on both white and black).
FEEDBACK = {
    "good": ("#000000", "#56B4E9"),  # black on sky blue
    "bad": ("#ffffff", "#8f2d00"),  # white on dark vermilion
    "note": ("#000000", "#F0E442"),  # black on yellow
    "past": ("#ffffff", "#3d3d3d"),  # white on dark grey: viewing a recorded moment
}


def _linear(channel: float) -> float:
    return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4


def _rgb(hex_colour: str) -> tuple[float, float, float]:
    h = hex_colour.lstrip("#")
    return (int(h[0:2], 16) / 255, int(h[2:4], 16) / 255, int(h[4:6], 16) / 255)


def luminance(hex_colour: str) -> float:
    r, g, b = (_linear(c) for c in _rgb(hex_colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two colours, 1..21."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


# Machado, Oliveira & Fernandes (2009), severity 1.0, applied to linear RGB.
_CVD = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}


def simulate(hex_colour: str, vision: str) -> tuple[float, float, float]:
    """The colour as seen with ``vision`` (protanopia, deuteranopia, tritanopia), linear RGB."""
    rgb = [_linear(c) for c in _rgb(hex_colour)]
    return tuple(min(1.0, max(0.0, sum(m * c for m, c in zip(row, rgb, strict=True)))) for row in _CVD[vision])  # type: ignore[return-value]


def _lab(linear_rgb: tuple[float, float, float]) -> tuple[float, float, float]:
    r, g, b = linear_rgb
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x), f(y), f(z)
    return (116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz))


def delta_e(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """CIE76 distance between two linear-RGB colours (about 2.3 is just noticeable)."""
    la, lb = _lab(a), _lab(b)
    return sum((p - q) ** 2 for p, q in zip(la, lb, strict=True)) ** 0.5
