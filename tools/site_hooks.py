"""mkdocs hooks for the course site (mkdocs.yml): the pages are assembled before mkdocs reads them.

``make docs`` runs ``mkdocs build``; on_config writes build/site-src from the repository:

- README.md as the front page (index.md), docs/*.md and their pictures as they are;
- each lesson (notebooks/NN_*.ipynb, present.ipynb) as executed and stored, with a "Run it" box
  (the Binder link, ``make lab``), each prediction's question with its answer folded, and each
  lab as its stored picture and readout (the widget view needs a kernel, so it is dropped);
- the tables that describe code, generated from it where a page marks one (tools/generated_docs.py:
  limits, keyspace, scripts, commands, the mutation score, stored benchmark runs);
- reference.md: the library's API, one entry per name of ``echoq.__all__`` (mkdocstrings);
- every repository file a page links to (lua/claim.lua, echoq/limits.py, ...), so the site
  carries its own sources and a link to a file that is gone fails the strict build.

Nothing is fetched: on_post_page drops the script tags nbconvert's template points at a CDN
(MathJax, Mermaid; no lesson uses either), and tests/test_site.py checks that no page loads
anything from outside the site.
"""

from __future__ import annotations

import base64
import html
import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WIDGET = "application/vnd.jupyter.widget-view+json"
ASK = re.compile(r"""course\.ask\(\s*["'](\d\d)["']\s*,\s*["']([\w-]+)["']\s*\)""")
# A Markdown link or image whose target is relative: [label](target) / ![alt](target).
LINK = re.compile(r"(!?\[(?:[^\[\]]|\[[^\]]*\])*\])\(([^)\s]+)\)")


def lessons() -> list[Path]:
    """The notebooks the site shows: the numbered lessons, then the panels to present."""
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + [ROOT / "notebooks" / "present.ipynb"]


# -- the lesson pages -------------------------------------------------------------------------


def _tool(name: str) -> Any:
    """A module of tools/ (not a package), loaded from its file once, as ``import name`` would."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def binder_url(lesson: str) -> str | None:
    """This repository's Binder link opening ``lesson`` (ECHOQ_REMOTE, else the git remote)."""
    binder_link = _tool("binder_link")
    if os.environ.get("ECHOQ_REMOTE"):  # asked for: a bad address is an error to see
        return binder_link.binder_url(os.environ["ECHOQ_REMOTE"], lesson)
    remote = binder_link.origin(ROOT)
    try:
        return binder_link.binder_url(remote, lesson) if remote else None
    except ValueError:  # a clone of a local path has no hosted address: the box says how to add one
        return None


def run_it_box(lesson: Path, url: str | None) -> str:
    name = f"notebooks/{lesson.name}"
    if url:
        binder = f'<a href="{html.escape(url)}">launch it on Binder</a> (nothing to install)'
    else:
        binder = (
            "launch it on Binder: <code>make binder-link</code> prints this repository's link "
            "(this checkout has no public address yet)"
        )
    return (
        '<div class="admonition example"><p class="admonition-title">Run it</p>'
        f"<p>This page is <code>{name}</code> as it was last run: its labs are still pictures. "
        "To run it, with the labs moving, clone the repository and type "
        f"<code>make lab</code> (JupyterLab opens the course on 127.0.0.1), or {binder}.</p></div>"
    )


def prediction_html(lesson: str, key: str) -> str:
    """A prediction readable without a kernel: the question, the options, the answer folded."""
    from echoq.teaching import predictions

    text, options, answer = predictions.QUESTIONS[lesson][key]
    letters = "ABCDEFGH"
    listed = "".join(f"<li><b>{letters[n]}.</b> {html.escape(opt)}</li>" for n, (opt, _) in enumerate(options))
    why = "".join(
        f"<li><b>{letters[n]}{' (right)' if n == answer else ''}.</b> {html.escape(expl)}</li>"
        for n, (_, expl) in enumerate(options)
    )
    return (
        f'<div class="admonition question prediction" data-lesson="{lesson}" data-key="{key}">'
        f'<p class="admonition-title">Predict</p><p>{html.escape(text)}</p><ul class="options">{listed}</ul>'
        f'<details class="success"><summary>The answer: choose first, then open</summary>'
        f"<p>Right: <b>{letters[answer]}</b>. {html.escape(options[answer][0])}</p><ul>{why}</ul></details></div>"
    )


def _site_link(target: str) -> str:
    """A link in a lesson's Markdown as the built site has it: pages are .html files."""
    if target.startswith(("http://", "https://", "mailto:", "#")):
        return target
    path, hash_, anchor = target.partition("#")
    if path == "glossary.ipynb":  # the lessons' copy of docs/GLOSSARY.md: the site has the page itself
        return "../docs/GLOSSARY.html" + hash_ + anchor
    if path.endswith("README.md"):
        path = path[: -len("README.md")] + "index.md"
    if path.endswith((".md", ".ipynb")):
        path = path.rsplit(".", 1)[0] + ".html"
    return path + hash_ + anchor


def stage_lesson(source: Path, dest: Path) -> None:
    nb = json.loads(source.read_text())
    nb.get("metadata", {}).pop("widgets", None)
    pictures: dict[Path, str] = {}  # each stored picture as a file beside the page, not inline
    for cell in nb["cells"]:
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            cell["source"] = LINK.sub(lambda m: f"{m.group(1)}({_site_link(m.group(2))})", text)
            continue
        if cell["cell_type"] != "code":
            continue
        asked = ASK.search(text)
        if asked:
            cell["outputs"] = [
                {"output_type": "display_data", "metadata": {}, "data": {"text/html": prediction_html(*asked.groups())}}
            ]
            continue
        for n, output in enumerate(cell.get("outputs", [])):
            data = output.get("data", {})
            data.pop(WIDGET, None)
            if "image/png" in data:
                picture = dest.parent / dest.stem / f"{cell.get('id', len(pictures))}-{n}.png"
                pictures[picture] = data.pop("image/png")
                data["text/html"] = _picture_html(data, picture.relative_to(dest.parent).as_posix(), pictures[picture])
    rel = source.relative_to(ROOT).as_posix()
    box = {"cell_type": "markdown", "id": "run-it", "metadata": {}, "source": run_it_box(source, binder_url(rel))}
    first_md = next((n for n, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), -1)
    nb["cells"].insert(first_md + 1, box)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(nb))
    for picture, data in pictures.items():
        picture.parent.mkdir(parents=True, exist_ok=True)
        picture.write_bytes(base64.b64decode(data))


ENLARGE = "echoq-picture"  # the class of a stored picture's link to itself (docs/assets/pictures.css)


def _picture_html(data: dict[str, Any], src: str, png: str) -> str:
    """The output's HTML with its picture as a file: a lab's figure, readout and note, or the
    bare image. The picture is a link to its file: drawn wider than the content column (a
    rejected answer's picture is), it opens at full size with a click."""
    png = "".join(png) if isinstance(png, list) else png
    shown = data.get("text/html")
    shown = "".join(shown) if isinstance(shown, list) else shown
    inline = f"data:image/png;base64,{png.strip()}"
    if shown and inline in shown:
        img = re.compile(r'<img\b[^>]*\bsrc="' + re.escape(inline) + r'"[^>]*>')
        return img.sub(lambda m: _enlarge(m.group(0).replace(inline, src), src), shown, count=1)
    text = data.get("text/plain", "")
    alt = "".join(text) if isinstance(text, list) else text
    return _enlarge(f'<img src="{src}" alt="{html.escape(alt.strip() or "a picture of this output")}"/>', src)


def _enlarge(img: str, src: str) -> str:
    return f'<a class="{ENLARGE}" href="{src}" title="open the picture at full size">{img}</a>'


# -- the reference ----------------------------------------------------------------------------


def reference_page() -> str:
    import echoq

    lines = [
        "# API reference",
        "",
        "The supported API is what `echoq` exports: `echoq.__all__`, each name below, generated from",
        "its docstring. `echoq.teaching` (the course's kit) is usable, but shaped for lessons.",
        "",
    ]
    for name in echoq.__all__:
        lines += [f"::: echoq.{name}", ""]
    return "\n".join(lines)


# -- the Markdown pages and the files they link to --------------------------------------------


def _listing(folder: Path) -> str:
    rel = folder.relative_to(ROOT).as_posix()
    lines = [f"# {rel}/", ""]
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith((".", "__")):
            continue
        if entry.is_file():
            lines.append(f"- [`{entry.name}`]({entry.name})")
        else:
            lines.append(f"- `{entry.name}/`")
    return "\n".join(lines) + "\n"


def _pipes_in_table_code(text: str) -> str:
    """A table cell's code span holding ``\\|`` (GitHub's escaped pipe) as HTML code showing ``|``:
    Python-Markdown would keep the backslash inside the code."""

    def code(match: re.Match[str]) -> str:
        inner = match.group(1)
        if "\\|" not in inner:
            return match.group(0)
        shown = html.escape(inner.replace("\\|", "|")).replace("|", "&#124;").replace("\\", "&#92;")
        return f"<code>{shown}</code>"

    return "\n".join(re.sub(r"`([^`]+)`", code, line) if line.startswith("|") else line for line in text.split("\n"))


def stage_markdown(text: str, page: Path, dest_root: Path) -> str:
    """The page's links as the site has them; each repository file it links to copied beside it."""

    def fix(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            return match.group(0)
        path, hash_, anchor = target.partition("#")
        source = (ROOT / page.parent / path).resolve()
        if source == ROOT / "README.md":
            return f"{label}({os.path.relpath(dest_root / 'index.md', dest_root / page.parent)}{hash_}{anchor})"
        if not source.is_relative_to(ROOT) or not source.exists():
            return match.group(0)  # mkdocs reports it: a broken link fails the strict build
        staged = dest_root / source.relative_to(ROOT)
        if source.is_dir():
            staged.mkdir(parents=True, exist_ok=True)
            for entry in source.iterdir():
                if entry.is_file() and not entry.name.startswith("."):
                    shutil.copy2(entry, staged / entry.name)
            (staged / "index.md").write_text(_listing(source))
            return f"{label}({path.rstrip('/')}/index.md{hash_}{anchor})"
        if not staged.exists():
            staged.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, staged)
        return match.group(0)

    fenced = re.split(r"(^```.*?^```)", text, flags=re.M | re.S)  # links in code blocks are code
    return "".join(part if part.startswith("```") else _pipes_in_table_code(LINK.sub(fix, part)) for part in fenced)


def stage(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "docs").mkdir(parents=True)
    for picture in (ROOT / "docs").glob("*.png"):
        shutil.copy2(picture, dest / "docs" / picture.name)
    shutil.copytree(ROOT / "docs" / "assets", dest / "assets", ignore=shutil.ignore_patterns("*.md"))
    for lesson in lessons():
        stage_lesson(lesson, dest / "notebooks" / lesson.name)
    pages = {Path("README.md"): Path("index.md")}
    pages.update({p.relative_to(ROOT): p.relative_to(ROOT) for p in sorted((ROOT / "docs").glob("*.md"))})
    generated = _tool("generated_docs")
    for source, target in pages.items():
        text = stage_markdown(generated.fill((ROOT / source).read_text()), source, dest)
        (dest / target).write_text(text)
    (dest / "reference.md").write_text(reference_page())


# -- mkdocs events ------------------------------------------------------------------------------


def on_config(config: Any) -> Any:
    dest = Path(config["docs_dir"])
    if dest.resolve() != (ROOT / "build" / "site-src").resolve():
        raise SystemExit(f"site_hooks: docs_dir must be build/site-src (it is written afresh), not {dest}")
    stage(dest)
    for extra in config["extra"].get("optional_nav", []):
        if not (dest / extra["file"]).exists():
            continue
        for section in config["nav"]:
            for entries in section.values():
                if isinstance(entries, list) and any(extra["after"] in e.values() for e in entries):
                    at = next(n for n, e in enumerate(entries) if extra["after"] in e.values())
                    entries.insert(at + 1, {extra["title"]: extra["file"]})
    return config


_CDN_SCRIPT = re.compile(r"<script[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>", re.S)
_CDN_MODULE = re.compile(r"<script type=\"module\">(?:(?!</script>).)*https?://(?:(?!</script>).)*</script>", re.S)
_MATHJAX_CONFIG = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)


def on_post_page(output: str, page: Any, config: Any) -> str:
    """Nothing from a CDN: nbconvert's template adds MathJax and Mermaid, which no lesson uses."""
    output = _MATHJAX_CONFIG.sub("", output)
    output = _CDN_SCRIPT.sub("", output)
    return _CDN_MODULE.sub("", output)


def on_post_template(output: str, template_name: str, config: Any) -> str:
    """The same for the theme's own pages (404.html: material points it at a CDN shim)."""
    return on_post_page(output, None, config)
