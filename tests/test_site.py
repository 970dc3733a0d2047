"""The course site (make docs): every lab pictured, predictions folded, nothing fetched, no dead link.

The strict build itself (a broken Markdown link, a missing page or any warning fails) is a step of
``make test``; these tests read what it built. tests/test_site_browser.py opens it in Chromium.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import echoq
from echoq.teaching import predictions
from tests.support.site import ROOT, built_site, site_hooks

WIDGET = "application/vnd.jupyter.widget-view+json"
LAB_CELL = re.compile(r"\b[A-Z]\w*Lab\(")
LESSONS = site_hooks().lessons()


def _cells(notebook: Path) -> list[dict]:
    return json.loads(notebook.read_text())["cells"]


def _text(value: str | list[str]) -> str:
    return "".join(value) if isinstance(value, list) else value


def _lab_cells(notebook: Path) -> list[dict]:
    return [c for c in _cells(notebook) if c["cell_type"] == "code" and LAB_CELL.search(_text(c["source"]))]


def _plain(fragment: str) -> str:
    """The text a reader sees in an HTML fragment."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _img(tag: str) -> tuple[str, str]:
    """(src, alt) of an <img> tag, in whatever order the page writes its attributes."""
    attrs = dict(re.findall(r'(\w+)="([^"]*)"', tag))
    return attrs.get("src", ""), html.unescape(attrs.get("alt", ""))


@pytest.fixture(scope="module")
def site() -> Path:
    return built_site()


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "the README is the front page: two minutes' reading, at most 200 lines"
    for page in re.findall(r"\]\((docs/[^)#]+\.md)", readme):
        assert (ROOT / page).is_file(), f"the README links to {page}, which does not exist"


@pytest.mark.parametrize("notebook", LESSONS, ids=lambda p: p.stem)
def test_every_lab_of_a_lesson_page_has_its_picture_and_readout(site: Path, notebook: Path) -> None:
    labs = _lab_cells(notebook)
    if notebook.stem[:2] in ("02", "03", "04", "05") or notebook.stem == "present":
        assert labs, f"{notebook.name} should show a lab"
    page = (site / "notebooks" / f"{notebook.stem}.html").read_text()
    for cell in labs:
        shown = [
            (src, alt)
            for src, alt in map(_img, re.findall(r"<img\b[^>]*>", page))
            if re.fullmatch(rf"{re.escape(notebook.stem)}/{re.escape(cell['id'])}-\d+\.png", src)
        ]
        assert shown, f"{notebook.name}: the lab of cell {cell['id']} has no picture on its page"
        for src, alt in shown:
            picture = site / "notebooks" / src
            assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{src} is not a PNG"
            assert len(alt) >= 20, f"{src}: its alt text says nothing ({alt!r})"
        stored = [o["data"] for o in cell["outputs"] if WIDGET in o.get("data", {})]
        readout = re.search(r"readout: (.+)", _text(stored[-1]["text/plain"])).group(1)
        assert readout in _plain(page), f"{notebook.name}: the lab's readout is not on its page"


@pytest.mark.parametrize("notebook", LESSONS, ids=lambda p: p.stem)
def test_stored_lab_outputs_carry_a_fallback_for_frontends_without_widgets(notebook: Path) -> None:
    """A frontend with no widget manager (Colab, VS Code without the extension, GitHub) renders the
    richest other type of the output: it must be the picture with its readout and a one-line note,
    never a widget's repr or nothing."""
    from echoq.teaching.lab.view import STILL

    for cell in _cells(notebook):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET not in data:
                continue
            plain, shown = _text(data.get("text/plain", "")), _text(data.get("text/html", ""))
            assert plain and not re.match(r"^\w+\(", plain), (
                f"{notebook.name}: a widget stored {plain[:60]!r} as its text"
            )
            assert shown.strip(), f"{notebook.name}: a widget stored no HTML for readers without a kernel"
            if LAB_CELL.search(_text(cell["source"])):
                assert "image/png" in data, f"{notebook.name}: the lab of cell {cell['id']} stored no picture"
                assert re.search(r'<img src="data:image/png;base64,[^"]+" alt="[^"]{20,}"', shown)
                assert html.escape(STILL) in shown and STILL in plain and "readout: " in plain


@pytest.mark.parametrize("notebook", LESSONS[:-1], ids=lambda p: p.stem)
def test_each_prediction_is_readable_with_its_answer_folded(site: Path, notebook: Path) -> None:
    lesson = notebook.stem[:2]
    page = (site / "notebooks" / f"{notebook.stem}.html").read_text()
    asked = [m.groups() for c in _cells(notebook) for m in site_hooks().ASK.finditer(_text(c["source"]))]
    assert len(asked) >= 2, f"lesson {lesson} asks fewer than two questions"
    for lesson_id, key in asked:
        text, options, answer = predictions.QUESTIONS[lesson_id][key]
        block = next(
            (
                body
                for tag, body in re.findall(
                    r'(<div class="admonition question prediction"[^>]*>)(.*?)</div>', page, re.S
                )
                if f'data-lesson="{lesson_id}"' in tag and f'data-key="{key}"' in tag
            ),
            None,
        )
        assert block, f"lesson {lesson}: prediction {key!r} is not on the page"
        before, _, folded = (_plain(part) for part in block.partition("<details"))
        assert text in before and all(opt in before for opt, _ in options)
        assert not any(why in before for _, why in options), "an explanation shows before it is asked for"
        assert f"Right: {'ABCDEFGH'[answer]}. {options[answer][0]}" in folded and options[answer][1] in folded


@pytest.mark.parametrize("notebook", LESSONS, ids=lambda p: p.stem)
def test_each_lesson_page_says_how_to_run_it(site: Path, notebook: Path) -> None:
    page = (site / "notebooks" / f"{notebook.stem}.html").read_text()
    box = re.search(r'<p class="admonition-title">Run it</p>(.*?)</div>', page, re.S)
    assert box and "<code>make lab</code>" in box.group(1) and "Binder" in box.group(1)


def test_the_run_it_box_links_binder_to_that_lesson(monkeypatch) -> None:
    hooks = site_hooks()
    monkeypatch.setenv("ECHOQ_REMOTE", "https://github.com/ada/echoq.git")
    lesson = ROOT / "notebooks" / "02_recoverable_claim.ipynb"
    url = hooks.binder_url("notebooks/02_recoverable_claim.ipynb")
    assert url == "https://mybinder.org/v2/gh/ada/echoq/HEAD?urlpath=lab/tree/notebooks/02_recoverable_claim.ipynb"
    assert f'<a href="{html.escape(url)}">' in hooks.run_it_box(lesson, url)
    assert "make binder-link" in hooks.run_it_box(lesson, None), "with no address the box says how to get one"


def test_a_clone_of_a_local_path_builds_its_site_without_a_binder_link(monkeypatch) -> None:
    """CI clones this repository from a path: its origin has no hosted address to link."""
    hooks = site_hooks()
    monkeypatch.delenv("ECHOQ_REMOTE", raising=False)
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import binder_link  # the module the hook imports

    monkeypatch.setattr(binder_link, "origin", lambda root=None: "/srv/checkouts/echoq/.")
    assert hooks.binder_url("notebooks/02_recoverable_claim.ipynb") is None


def test_the_reference_documents_every_name_the_library_exports(site: Path) -> None:
    page = (site / "reference.html").read_text()
    missing = [name for name in echoq.__all__ if f'id="echoq.{name}"' not in page]
    assert not missing, f"the API reference lacks {missing}"


def _pages(site: Path) -> list[Path]:
    # 404.html is for a web server (its links start at the server's root), never opened from a file.
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def test_no_page_loads_anything_from_outside_the_site(site: Path) -> None:
    """Offline: no script, style sheet, font or picture from a CDN (links to read elsewhere are fine)."""
    outside = re.compile(r"<(?:script|img|iframe|link)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]+\"", re.I)
    found = {p.relative_to(site).as_posix(): outside.findall(p.read_text())[:2] for p in site.rglob("*.html")}
    found = {page: tags for page, tags in found.items() if tags}
    assert not found, f"pages load from the internet: {found}"
    assert not any("@import url(http" in p.read_text() for p in site.rglob("*.css"))


def test_every_link_between_pages_resolves(site: Path) -> None:
    """mkdocs checks the Markdown pages' links; this checks every page's, the lessons' included."""
    link = re.compile(r"""<(?:a|img|script|link)\b[^>]*?\b(?:href|src)="([^"]+)\"""")
    broken = []
    for page in _pages(site):
        for target in link.findall(page.read_text()):
            parts = urlsplit(html.unescape(target))
            if parts.scheme or parts.netloc or not parts.path or target.startswith("data:"):
                continue
            if not (page.parent / unquote(parts.path)).resolve().exists():
                broken.append(f"{page.relative_to(site)} -> {target}")
    assert not broken, f"{len(broken)} links lead nowhere: {broken[:10]}"


EXAMPLE_CELL = re.compile(r'exercises\.example\("(\w+)", "([\w-]+)"\)')


REJECTED = [n for n in LESSONS if any(EXAMPLE_CELL.search(_text(c["source"])) for c in _cells(n))]


@pytest.mark.parametrize("notebook", REJECTED, ids=lambda p: p.stem)
def test_a_rejected_answers_feedback_is_pictured_on_its_lesson_page(site: Path, notebook: Path) -> None:
    """The feedback on a rejected answer (exercises.example): on the page, its lines and its picture
    as a file, whose alt text is the ✗ line the lines end with."""
    assert len(REJECTED) >= 3, "lessons 02, 03 and 04 show a rejected answer's feedback"
    page = (site / "notebooks" / f"{notebook.stem}.html").read_text()
    for cell in _cells(notebook):
        if cell["cell_type"] != "code" or not EXAMPLE_CELL.search(_text(cell["source"])):
            continue
        shown = [
            (src, alt)
            for src, alt in map(_img, re.findall(r"<img\b[^>]*>", page))
            if re.fullmatch(rf"{re.escape(notebook.stem)}/{re.escape(cell['id'])}-\d+\.png", src)
        ]
        assert shown, f"{notebook.name}: the rejected answer of cell {cell['id']} has no picture on its page"
        (src, alt), *_ = shown
        line = alt.partition("✗ ")[2]
        assert line.startswith("[") and html.escape(line, quote=False) in page, f"{src}: alt {alt!r}"
        assert (site / "notebooks" / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # Drawn wider than the content column: a click opens it at full size (its own file).
        link = rf'<a class="echoq-picture" href="{re.escape(src)}"[^>]*><img\b[^>]*src="{re.escape(src)}"'
        assert re.search(link, page), f"{src}: not a link to itself"
