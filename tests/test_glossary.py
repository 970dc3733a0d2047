"""One name per concept: the glossary's table of words not to use (docs/GLOSSARY.md, "Words not
to use") applied to the code, the tests, the docs and the lessons. A use of a word outside the
places its row keeps it in fails with its file and line; a row's pending renames are skipped,
each saying where the word still is."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "docs" / "GLOSSARY.md"
# Files that must hold the words: the table itself, its copy for the lessons, the notebook
# tool's table of replacements (it names the old words to replace them), and the tests that
# plant them to show a check fails.
NAMES_THE_WORDS = {
    "docs/GLOSSARY.md",
    "notebooks/glossary.ipynb",
    "tools/lesson_notebooks.py",
    "tests/test_glossary.py",
    "tests/test_docs_names.py",
    "tests/test_lesson_notebooks.py",
}


@dataclass(frozen=True)
class Word:
    pattern: re.Pattern[str]
    say: str
    kept_in: tuple[str, ...]
    pending_in: tuple[str, ...]
    why: str


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells; ``\\|`` is a ``|`` inside a cell."""
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def _places(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"`([^`]+)`", cell))


def words(text: str | None = None) -> list[Word]:
    """The rows of the glossary's last table."""
    text = GLOSSARY.read_text() if text is None else text
    section = text.split("## Words not to use", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    found = []
    for row in rows:
        word, say, kept, pending, why = _cells(row)
        found.append(Word(re.compile(word.strip("`")), say, _places(kept), _places(pending), why))
    return found


def sources() -> dict[str, list[str]]:
    """Every file the words are searched in, as lines (a notebook: its cells' sources and outputs)."""
    paths = [
        *(ROOT / "echoq").rglob("*.py"),
        *(ROOT / "echoq").rglob("*.lua"),
        *(ROOT / "lua").rglob("*.lua"),
        *(ROOT / "bench").glob("*.py"),
        *(ROOT / "tools").glob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
    found = {p.relative_to(ROOT).as_posix(): p.read_text().splitlines() for p in paths}
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        lines: list[str] = []
        for cell in json.loads(nb.read_text())["cells"]:
            lines += "".join(cell["source"]).splitlines()
            for output in cell.get("outputs", []):
                shown = output.get("text") or output.get("data", {}).get("text/plain", "")
                lines += ("".join(shown) if isinstance(shown, list) else shown).splitlines()
        found[nb.relative_to(ROOT).as_posix()] = lines
    return {name: lines for name, lines in found.items() if name not in NAMES_THE_WORDS}


def uses(word: Word, files: dict[str, list[str]]) -> list[tuple[str, int, str]]:
    return [
        (name, n, line.strip())
        for name, lines in sorted(files.items())
        for n, line in enumerate(lines, 1)
        if word.pattern.search(line)
    ]


def under(name: str, places: tuple[str, ...]) -> bool:
    return any(name == p or (p.endswith("/") and name.startswith(p)) for p in places)


WORDS = words()
FILES = sources()


def test_the_table_is_read() -> None:
    assert len(WORDS) >= 8
    patterns = [w.pattern.pattern for w in WORDS]
    assert r"\b(?:delivery|claim)\.attempt\b" in patterns  # a \| in a cell is a | of the pattern
    for word in WORDS:
        assert word.say, word.pattern.pattern
        assert not (word.kept_in or word.pending_in) or word.why, f"{word.pattern.pattern}: say why"
        for place in word.kept_in + word.pending_in:
            assert (ROOT / place).exists(), f"{word.pattern.pattern}: {place} is not there"


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.pattern.pattern)
def test_no_word_the_glossary_bans_is_used(word: Word) -> None:
    found = uses(word, FILES)
    wrong = [f"{name}:{n}: {line}" for name, n, line in found if not under(name, word.kept_in + word.pending_in)]
    assert not wrong, f"say {word.say!r} instead:\n" + "\n".join(wrong)
    pending = sorted({name for name, _, _ in found if under(name, word.pending_in)})
    if word.pending_in:
        gone = [p for p in word.pending_in if not any(under(name, (p,)) for name in pending)]
        note = f"; no longer in {', '.join(gone)}: take it out of the row" if gone else ""
        pytest.skip(f"rename pending ({word.why}): still in {', '.join(pending) or 'nothing'}{note}")


def test_a_banned_word_fails_with_its_file_and_line() -> None:
    word = next(w for w in WORDS if "delivery" in w.pattern.pattern)
    planted = {"docs/worker.md": ["fine", "the handler reads delivery.attempt"]}
    assert uses(word, planted) == [("docs/worker.md", 2, "the handler reads delivery.attempt")]
    table = "## Words not to use\n\n| word | say | kept in | pending | why |\n|---|---|---|---|---|\n"
    row = "| `\\bfoo\\|bar\\b` | baz | `docs/x.md` | | a reason |\n"
    (parsed,) = words(table + row)
    assert parsed.pattern.pattern == r"\bfoo|bar\b" and parsed.kept_in == ("docs/x.md",)
    assert not under("docs/y.md", parsed.kept_in) and under("echoq/x.py", ("echoq/",))
