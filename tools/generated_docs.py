"""The tables that describe code, generated from it when the site is built (tools/site_hooks.py).

A page holds a marker where a table goes, and one line saying where it comes from::

    <!-- generated: limits -->
    The bounds, generated from echoq/limits.py when the site is built (make docs).
    <!-- /generated -->

``fill(text)`` replaces each marked region with what ``GENERATORS[name]()`` returns; an
unknown name is an error, so a page cannot point at a table nobody makes. The sources:

- ``limits``: ``echoq.limits.BOUNDS``, each bound's reason from the table in that module's
  docstring, its default from the Queue's and the Worker's signatures;
- ``keyspace``: ``echoq.Keyspace`` (each key it builds) with the table in its module's docstring;
- ``scripts``: each ``lua/*.lua`` header (what the script does, KEYS, ARGV with units,
  replies, errors);
- ``script-errors``: ``echoq.SCRIPT_ERRORS``, each error reply and the typed error it raises;
- ``commands``: each command's own ``--help``, run in this process;
- ``mutation-score``: ``tools/mutants.json``, the run ``tools/mutants.py --record`` wrote;
- ``docstring-<module>``: the module's docstring (design prose written once, in the code), each
  constant it names shown with its value;
- ``fields-<module.Class>``: a dataclass's fields, each with its comment;
- ``bench-<name>``: ``docs/data/bench/<name>.json``, a bench's ``--json`` report stored with the
  date, commit, command and the machine's load by tools/store_run.py, rendered by that
  bench's own ``render()`` (``<name>`` is the bench, or ``<bench>.<variant>`` for another
  stored run of it);
- ``value-<module.NAME>`` (or ``<module.Class.attribute>``): one constant (a number, or a tuple
  of names such as ``echoq.scripts.KEY_ORDER``, shown "a, b, c"), in a sentence. It is
  the one region kept filled in the page itself, on one line, so the page reads right where
  it is not built (``<!-- generated: value-x.Y -->18<!-- /generated -->``); a test checks
  each against the code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import importlib
import inspect
import io
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"
MUTANTS_RECORD = ROOT / "tools" / "mutants.json"
REGION = re.compile(r"<!-- generated: ([\w.-]+) -->\n.*?<!-- /generated -->", re.S)
INLINE = re.compile(r"<!-- generated: (value-[\w.]+) -->([^<\n]*)<!-- /generated -->")

# The commands the site documents, each as the words after ``python -m``.
COMMANDS: list[list[str]] = [["echoq"], ["echoq.teaching"]]  # each subcommand is found from its parent's usage


def command_tree() -> list[tuple[list[str], str]]:
    """Every command under COMMANDS with its --help: a usage line's ``{a,b} ...`` names the
    subcommands, each visited in turn, so a new one is on the page without a list to edit."""
    found: list[tuple[list[str], str]] = []
    todo = [list(words) for words in COMMANDS]
    while todo:
        words = todo.pop(0)
        code, text = help_text(words[0], words[1:])
        if code != 0:
            raise ValueError(f"python -m {' '.join(words)} --help exits {code}: {text.strip()}")
        found.append((words, text))
        usage = text.split("\n\n", 1)[0]
        choices = re.search(r"\{([\w,-]+)\}\s+\.\.\.", usage)  # subparsers; a positional's choices has no "..."
        if choices:
            todo[0:0] = [[*words, sub] for sub in choices.group(1).split(",")]
    return found


def help_text(module_name: str, argv: list[str], columns: int = 100) -> tuple[int, str]:
    """``python -m module argv --help`` in this process: its exit status and what it printed."""
    module = importlib.import_module(module_name)
    if hasattr(module, "__path__") and importlib.util.find_spec(module_name + ".__main__") is not None:
        module = importlib.import_module(module_name + ".__main__")
    return module_help(module, module_name, argv, columns)


def module_help(module: Any, prog: str, argv: list[str], columns: int = 100) -> tuple[int, str]:
    """``module.main(argv + ['--help'])``: its parser prints the help and exits; nothing else runs."""
    main = getattr(module, "main", None)
    if main is None or "ArgumentParser" not in inspect.getsource(module):
        return 1, f"{prog} has no parser to ask"
    out = io.StringIO()
    saved, saved_columns = sys.argv, os.environ.get("COLUMNS")
    code = 0
    try:
        sys.argv = [prog, *argv, "--help"]
        os.environ["COLUMNS"] = str(columns)  # argparse wraps to it: the same text on every machine
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            main([*argv, "--help"]) if inspect.signature(main).parameters else main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved
        if saved_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_columns
    return code, out.getvalue()


def rst_table(text: str) -> list[list[str]]:
    """The rows of the first reStructuredText simple table in ``text`` (cells joined across
    continuation lines, ````x```` as Markdown's ```x```), the header row first."""
    lines = text.splitlines()
    borders = [n for n, line in enumerate(lines) if re.fullmatch(r"\s*=+(?:\s+=+)+\s*", line)]
    if len(borders) < 3:
        raise ValueError("no simple table")
    spans = [m.span() for m in re.finditer(r"=+", lines[borders[0]])]

    starts = [a for a, _ in spans]

    def cells(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line)], strict=True)]

    header = cells(lines[borders[0] + 1])
    rows: list[list[str]] = []
    for line in lines[borders[1] + 1 : borders[2]]:
        if not line.strip():
            continue
        row = cells(line)
        if row[0] or not rows:
            rows.append(row)
        else:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], row, strict=True)]
    return [[re.sub(r"``([^`]+)``", r"`\1`", c) for c in row] for row in [header, *rows]]


def table(rows: list[list[str]]) -> str:
    head, *body = rows
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(lines)


# -- the generators ------------------------------------------------------------------------------


def _defaults() -> dict[str, Any]:
    import echoq

    found: dict[str, Any] = {}
    for call in (echoq.Queue.__init__, echoq.Worker.__init__, echoq.Effects.__init__):
        for name, param in inspect.signature(call).parameters.items():
            if param.default is not inspect.Parameter.empty and isinstance(param.default, int):
                found.setdefault(name, param.default)
    return found


def limits() -> str:
    import echoq.limits

    why = {row[0].strip("`"): row[2].strip() for row in rst_table(echoq.limits.__doc__ or "")[1:]}
    missing = [name for name in echoq.limits.BOUNDS if not why.get(name)]
    if missing:
        raise ValueError(f"echoq/limits.py's table gives no reason (why this size) for {missing}: a bound needs one")
    defaults = _defaults()
    rows = [["bound", "range", "default", "why this size"]]
    for name, (low, high) in echoq.limits.BOUNDS.items():
        default = f"{defaults[name]:,}" if name in defaults else ""
        rows.append([f"`{name}`", f"{low:,} .. {high:,}", default, why[name]])
    source = "[`echoq/limits.py`](../echoq/limits.py) (`BOUNDS`) and the defaults of `Queue`, `Worker` and `Effects`"
    return table(rows) + f"\n\nGenerated from {source}."


def keyspace() -> str:
    import echoq.keyspace

    ks = echoq.Keyspace("q")
    built = {
        getattr(ks, name) if not callable(getattr(ks, name)) else ""
        for name, value in vars(echoq.Keyspace).items()
        if isinstance(value, property) and name not in {"prefix", "namespace"}
    } | {ks.job("JOB" + "0" * 26).rsplit(":", 1)[0] + ":<id>", ks.prefix + "halt:<run>"}
    rows = rst_table(echoq.keyspace.__doc__ or "")
    for row in rows[1:]:
        key = row[0].strip("`")
        if key not in built:
            raise ValueError(f"echoq/keyspace.py's table names {key}, which Keyspace does not build")
    missing = built - {row[0].strip("`") for row in rows[1:]}
    if missing:
        raise ValueError(f"echoq/keyspace.py's table leaves out {sorted(missing)}")
    return table(rows) + "\n\nGenerated from [`echoq/keyspace.py`](../echoq/keyspace.py): `Keyspace` and its table."


def script_errors() -> str:
    """The error replies of the scripts and the typed error each is raised as (``SCRIPT_ERRORS``)."""
    import echoq

    rows = [["reply's first word", "raised as", "means"]]
    rows += [[f"`{code}`", f"`{cls.__name__}`", means] for code, (cls, means) in echoq.SCRIPT_ERRORS.items()]
    return table(rows) + "\n\nGenerated from `echoq.SCRIPT_ERRORS`."


def lua_header(path: Path) -> dict[str, Any]:
    """A script's header: its first sentence, and its KEYS, ARGV, Replies and Errors lines."""
    header: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("--") or line.startswith("--- @include"):
            break
        header.append(line[3:] if line.startswith("-- ") else line[2:])
    paragraph = " ".join(header[: header.index("") if "" in header else len(header)])
    first = paragraph.split(": ", 1)[-1]  # "claim.lua: the recoverable claim. ..." -> what it does
    first = first[0].upper() + first[1:]
    at = next((n for n, line in enumerate(header) if line.startswith("KEYS")), len(header))
    return {"name": path.name, "what": first, "contract": "\n".join(header[at:]).rstrip()}


def scripts() -> str:
    parts = ["| script | what it does |", "|---|---|"]
    headers = [lua_header(p) for p in sorted((ROOT / "lua").glob("*.lua"))]
    parts += [f"| [`{h['name']}`](../lua/{h['name']}) | {h['what']} |" for h in headers]
    for h in headers:
        parts += [
            "",
            f'<details markdown="1"><summary><code>{h["name"]}</code>: KEYS, ARGV, replies, errors</summary>',
            "",
            "```",
            h["contract"],
            "```",
            "",
            "</details>",
        ]
    parts += ["", "Generated from the header of each script in [`lua/`](../lua/)."]
    return "\n".join(parts)


def benches() -> list[Path]:
    """The benchmarks with a command line of their own (bench/*.py with a parser)."""
    return [p for p in sorted((ROOT / "bench").glob("[a-z]*.py")) if "ArgumentParser" in p.read_text()]


def commands() -> str:
    parts: list[str] = ["## The library and the kit", ""]
    for words, text in command_tree():
        parts += [f"### `python -m {' '.join(words)}`", "", "```", text.rstrip(), "```", ""]
    parts += ["## The benchmarks", ""]
    for path in benches():
        shown = f"bench/{path.name}"
        code, text = module_help(bench_module(path.stem), shown, [])
        if code != 0:
            raise ValueError(f"python {shown} --help exits {code}: {text.strip()}")
        parts += [f"### `python {shown}`", "", "```", text.rstrip(), "```", ""]
    return "\n".join(parts) + "Generated from each command's own `--help`."


def _value(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _seconds(value: float) -> str:
    """0.005 -> '5 ms', 5e-05 -> '50 µs', 2 -> '2 s'."""
    for unit, scale in (("s", 1), ("ms", 1e3), ("µs", 1e6)):
        if value * scale >= 1:
            return f"{value * scale:g} {unit}"
    return f"{value:g} s"


def _constant(module_name: str, name: str) -> str | None:
    """A constant of the module or one of its submodules, shown with its unit."""
    for loaded, module in list(sys.modules.items()):
        if (loaded == module_name or loaded.startswith(module_name + ".")) and module is not None:
            value = vars(module).get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                if name.endswith("_S"):
                    return _seconds(value)
                return f"{_value(value)} ms" if name.endswith("_MS") else _value(value)
    return None


def docstring(module_name: str) -> str:
    """A module's docstring as Markdown: its roles as code, each constant it names with its value."""
    module = importlib.import_module(module_name)
    text = inspect.cleandoc(module.__doc__ or "")
    text = re.sub(r":(?:class|meth|func|mod|data|attr|exc):`~?\.?([^`]+)`", r"`\1`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)

    def valued(match: re.Match[str]) -> str:
        shown = _constant(module_name, match.group(1))
        return f"{match.group(0)} ({shown})" if shown else match.group(0)

    text = re.sub(r"`([A-Z][A-Z0-9_]+)`(?! \()", valued, text)
    text = re.sub(r"^(>>> .*(?:\n>>> .*)*)", r"```python\n\1\n```", text, flags=re.M)
    text = re.sub(r"^\* ", "- ", text, flags=re.M)
    return text + f"\n\nThe docstring of `{module_name}` (the API reference shows it too)."


def _stored(path: Path) -> dict[str, Any] | None:
    """A run stored by tools/store_run.py: date, commit, command and the run's own report."""
    return json.loads(path.read_text()) if path.is_file() else None


def _when(stored: dict[str, Any]) -> str:
    return f"measured {html.escape(str(stored['date']))} on commit `{html.escape(str(stored.get('commit', '?')))}`"


def _not_stored(name: str) -> str:
    return f"Stored by `.venv/bin/python tools/store_run.py {name}`; this checkout has no stored run yet."


def mutation_score() -> str:
    """The mutation run tools/mutants.py recorded (``--record``): per exercise, with its date."""
    if not MUTANTS_RECORD.is_file():
        return "Recorded by `.venv/bin/python tools/mutants.py --record`; this checkout has no recorded run yet."
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        mutants = importlib.import_module("mutants")
    finally:
        sys.path.remove(str(ROOT / "tools"))
    record = json.loads(MUTANTS_RECORD.read_text())
    when = f"\n\nThis run was {_when(record)}." if "date" in record else ""
    return mutants.score_markdown(record) + when


def bench_module(name: str) -> Any:
    """bench/<name>.py as a module (bench/ is not a package; its modules import _common)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def bench_shown(name: str, stored: dict[str, Any]) -> str:
    """What the bench's own render() draws of a stored run's report."""
    return str(bench_module(name.split(".", 1)[0]).render(stored["report"]))


def bench(name: str) -> str:
    """A stored run, as the bench itself renders it (its machine on the second line), dated,
    with the load the machine had."""
    stored = _stored(DATA / "bench" / f"{name}.json")
    if stored is None:
        return _not_stored(name)
    when = _when(stored)
    load = stored.get("load")
    loaded = f" (load average {load['before'][0]} when it began, {load['after'][0]} when it ended)" if load else ""
    again = f"`.venv/bin/python tools/store_run.py {name}` measures it again"
    return (
        f"```\n{bench_shown(name, stored)}\n```\n\n{when[0].upper()}{when[1:]}{loaded}, with `{stored['command']}`; "
        f"{again}."
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "limits": limits,
    "keyspace": keyspace,
    "scripts": scripts,
    "script-errors": script_errors,
    "commands": commands,
    "mutation-score": mutation_score,
}


def fields(dotted: str) -> str:
    """A dataclass's fields, each with its comment in the source: ``name`` (what it counts)."""
    module_name, _, cls_name = dotted.rpartition(".")
    cls = getattr(importlib.import_module(module_name), cls_name)
    source = inspect.getsource(cls)
    shown = []
    for field in dataclasses.fields(cls):
        comment = re.search(rf"^\s+{field.name}\s*:[^#\n]*#\s*(.+)$", source, re.M)
        shown.append(f"`{field.name}` ({comment.group(1).strip()})" if comment else f"`{field.name}`")
    return ", ".join(shown) + f" (the fields of `{cls_name}`)."


def value(dotted: str) -> str:
    """A constant of the code as a page says it: a whole number as it is, seconds (a name
    ending in ``_s``) with their unit, a tuple of names as "a, b, c"."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        if isinstance(found, tuple) and found and all(isinstance(item, str) for item in found):
            return ", ".join(found)
        if isinstance(found, bool) or not isinstance(found, int | float):
            raise ValueError(f"{dotted} is {found!r}: not a number, nor a tuple of names")
        return _seconds(found) if parts[-1].lower().endswith("_s") else _value(found)
    raise ValueError(f"no module in {dotted}")


def inline_values(text: str) -> list[tuple[str, str]]:
    """Each one-line region of a page: (its name, the value the page holds)."""
    return INLINE.findall(text)


def generator(name: str) -> Callable[[], str]:
    if name.startswith("fields-"):
        return lambda: fields(name.removeprefix("fields-"))
    if name.startswith("docstring-"):
        return lambda: docstring(name.removeprefix("docstring-"))
    if name.startswith("bench-"):
        return lambda: bench(name.removeprefix("bench-"))
    if name.startswith("value-"):
        return lambda: value(name.removeprefix("value-"))
    if name not in GENERATORS:
        raise KeyError(f"no table is generated under the name {name!r}: one of {sorted(GENERATORS)} or bench-<name>")
    return GENERATORS[name]


def regions(text: str) -> list[str]:
    """The names of the generated regions of a page (one-line ones too)."""
    return REGION.findall(text) + [name for name, _ in INLINE.findall(text)]


def fill(text: str) -> str:
    """The page with each generated region replaced by its table (the markers kept)."""

    def made(match: re.Match[str]) -> str:
        return f"<!-- generated: {match.group(1)} -->\n{generator(match.group(1))()}\n<!-- /generated -->"

    def inline(match: re.Match[str]) -> str:
        return f"<!-- generated: {match.group(1)} -->{generator(match.group(1))()}<!-- /generated -->"

    return INLINE.sub(inline, REGION.sub(made, text))
