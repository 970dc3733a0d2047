"""The notebooks are in the form tools/lesson_notebooks.py gives them: no nbval marker a learner
can see (tags instead, ones the pinned nbval reads), a glossary link that stays inside the
folder the server shows, a glossary notebook that is docs/GLOSSARY.md, lesson 00's table of
every lesson, and no stray value at the end of a cell the tool fixed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import nbval.plugin
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def tool():
    spec = importlib.util.spec_from_file_location("lesson_notebooks", ROOT / "tools" / "lesson_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_notebooks_are_what_the_tool_makes(capsys: pytest.CaptureFixture[str]) -> None:
    assert tool().main(["--check"]) == 0, capsys.readouterr().out


def test_the_tool_finds_what_it_would_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lessons = tool()
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nb = json.loads((ROOT / "notebooks" / "02_recoverable_claim.ipynb").read_text())
    first = nb["cells"][0]
    first["source"] = "".join(first["source"]).replace("](glossary.ipynb)", "](../docs/GLOSSARY.md)")
    code = next(c for c in nb["cells"] if "nbval-check-output" in c["metadata"].get("tags", []))
    code["metadata"]["tags"].remove("nbval-check-output")
    code["source"] = "# NBVAL_CHECK_OUTPUT\n" + "".join(code["source"])
    (folder / "02_recoverable_claim.ipynb").write_text(lessons.dump(nb))
    (folder / "glossary.ipynb").write_text((ROOT / "notebooks" / "glossary.ipynb").read_text())
    monkeypatch.setattr(lessons, "NOTEBOOKS", folder)
    assert lessons.main(["--check"]) == 1
    assert lessons.main([]) == 0 and lessons.main(["--check"]) == 0  # fixed, and the fix is stable
    fixed = json.loads((folder / "02_recoverable_claim.ipynb").read_text())
    assert "](glossary.ipynb)" in "".join(fixed["cells"][0]["source"])
    again = next(c for c in fixed["cells"] if c["id"] == code["id"])
    assert again["metadata"]["tags"] == ["nbval-check-output"] and "NBVAL" not in "".join(again["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_visible_nbval_marker_and_only_tags_nbval_reads(path: Path) -> None:
    for cell in json.loads(path.read_text())["cells"]:
        assert "NBVAL_" not in "".join(cell["source"]), f"{path.name} {cell.get('id')}: a marker a learner sees"
        for tag in cell["metadata"].get("tags", []):
            if tag.startswith("nbval"):
                assert tag in nbval.plugin.metadata_tags, f"{path.name}: nbval {nbval.__version__} ignores {tag!r}"


def test_the_glossary_notebook_is_the_glossary() -> None:
    nb = json.loads((ROOT / "notebooks" / "glossary.ipynb").read_text())
    text = "\n\n".join("".join(c["source"]) for c in nb["cells"] if c["id"] != "glossary-source")
    assert text == (ROOT / "docs" / "GLOSSARY.md").read_text().strip()
    assert all(c["cell_type"] == "markdown" for c in nb["cells"])


def test_lesson_00_lists_every_lesson_with_its_time() -> None:
    nb = json.loads((ROOT / "notebooks" / "00_start_here.ipynb").read_text())
    course = "".join(next(c for c in nb["cells"] if c["id"] == "c16")["source"])
    for lesson in sorted((ROOT / "notebooks").glob("0[1-9]_*.ipynb")):
        assert f"]({lesson.name}) |" in course, lesson.name
    attach = next(c for c in nb["cells"] if c["id"] == "attach")
    shown = "".join(o.get("text", "") for o in attach["outputs"]) + json.dumps(attach["outputs"])
    assert "--askpass" in shown and ":***@" in shown and "reveal=True" in shown


def test_readme_times_are_the_lessons_own() -> None:
    readme = (ROOT / "README.md").read_text()
    for lesson in sorted((ROOT / "notebooks").glob("0[0-9]_*.ipynb")):
        row = tool().lesson_row(lesson)
        minutes = row.rsplit("|", 2)[-2].strip().split()[0]
        line = next(ln for ln in readme.splitlines() if f"[`{lesson.stem}`]" in ln)
        assert line.rstrip(" |").endswith(f"{minutes} min"), f"README's time for {lesson.stem} is not the lesson's"
