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
import re
import string
from collections.abc import Iterable

__all__ = ["LONGEST", "Markup", "esc", "esc_block", "join", "keep_words", "render", "text"]

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


_TAG = re.compile(r"(<[^>]*>)")
_WORD = re.compile(r"[^\s<]+")
_CHAR = re.compile(r"&#?\w+;|.", re.DOTALL)  # an entity is one character on the page
_PLAIN = re.compile(r"[\w.,:;'\"()\[\]]+")  # no line may break inside these (Unicode's line-break rules)
BREAK_EVERY = 40  # a "word" longer than this (learner-written junk) may break every so many characters


def keep_words(markup: str) -> Markup:
    """``markup`` with no word broken across two lines: a word a browser could break at a
    hyphen, a slash or a bracket (``lesson-02``, ``emq:{ada.x}``) is kept whole, and only a
    run of more than ``BREAK_EVERY`` characters without a space -- text no person writes,
    which would push a table off the screen -- may break, every ``BREAK_EVERY``. Tags and a
    ``<style>`` block are left as they are."""
    out, in_style = [], False
    for part in _TAG.split(markup):
        if part.startswith("<"):
            lowered = part.lower()
            in_style = lowered.startswith("<style") or (in_style and not lowered.startswith("</style"))
            out.append(part)
        elif in_style or not part.strip():
            out.append(part)
        else:
            out.append(_WORD.sub(_kept, part))
    return Markup("".join(out))


def _kept(match: re.Match[str]) -> str:
    word = match.group(0)
    chars = _CHAR.findall(word)
    if len(chars) > BREAK_EVERY:
        return "<wbr>".join("".join(chars[i : i + BREAK_EVERY]) for i in range(0, len(chars), BREAK_EVERY))
    return word if _PLAIN.fullmatch(word) else f"<span class='w'>{word}</span>"
