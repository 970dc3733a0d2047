"""The one way the workshop's pages build HTML: every value is escaped unless it says it is HTML.

Everything a learner can write on the shared server -- their progress record, the class
chaos counters, the names of their queues, what the ACL log quotes of their commands -- is
text, never markup. A view builds its HTML with :func:`render`: a ``string.Template``
whose every ``$value`` is escaped (``<``, ``>``, ``&``, both quotes), cut to a readable
length and stripped of control characters, except a value that is already
:class:`Markup` (the output of another :func:`render`). Forgetting to escape is then not
possible: the unsafe path is the one that needs a word, ``Markup(...)``, written on purpose.

    >>> render("<td>$name</td>", name="<img src=x onerror=alert(1)>")
    '<td>&lt;img src=x onerror=alert(1)&gt;</td>'
"""

from __future__ import annotations

import html
import string
from collections.abc import Iterable

__all__ = ["LONGEST", "Markup", "esc", "esc_block", "join", "render", "text"]

LONGEST = 200  # characters of one learner-written value shown; the rest is cut (a page stays readable)


class Markup(str):
    """A fragment of HTML this package built itself (by :func:`render`): inserted as is."""


def text(value: object, longest: int | None = LONGEST) -> str:
    """``value`` as plain, printable text: bytes decoded (bad UTF-8 replaced), control
    characters dropped, cut to ``longest`` characters with an ellipsis."""
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", errors="replace")
    shown = "".join(ch for ch in str(value) if ch.isprintable() or ch == " ")
    if longest is not None and len(shown) > longest:
        shown = shown[: longest - 1] + "…"
    return shown


def esc(value: object, longest: int | None = LONGEST) -> Markup:
    """``value`` escaped for HTML (text and attribute values alike); Markup is kept as is."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(text(value, longest), quote=True))


def esc_block(value: object) -> Markup:
    """A block of text (a learner's code, for a ``<pre>``) escaped whole: its line breaks and
    tabs kept, other control characters dropped, nothing cut."""
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", errors="replace")
    lines = [text(line, None) for line in str(value).replace("\t", "    ").splitlines()]
    return Markup(html.escape("\n".join(lines), quote=True))


def render(template: str, **values: object) -> Markup:
    """``template`` with each ``$name`` replaced by ``esc(values[name])``.

    The template is the page's own text (trusted); every value is data. A value that is
    :class:`Markup` (built by another ``render``) goes in unchanged."""
    return Markup(string.Template(template).substitute({name: esc(v) for name, v in values.items()}))


def join(separator: str, parts: Iterable[object]) -> Markup:
    """``parts`` escaped (Markup kept) and joined by ``separator`` (the page's own text)."""
    return Markup(separator.join(esc(p) for p in parts))
