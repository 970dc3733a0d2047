"""The docs read against the code: every name a page or a lesson's prose puts in a code span.

``problems(source)`` returns one line per name that does not exist, as ``file:line: `span`:
why``. What it checks, by the shape of the span:

- a path (``lua/claim.lua``, ``echoq/teaching/``, ``includes/wake.lua``): the file or folder
  is in the repository, beside the page, or at the end of a path that is;
- a dotted name rooted in the package (``echoq.scripts.KEY_ORDER``): it imports, and each
  attribute after the module is there;
- an attribute of a class or of an object the docs name by its class (``Claim.token``,
  ``delivery.lease_lost``): the class has it (a field, a property, a method, a member);
- a command (``python -m echoq.teaching chaos --workers 4``, ``make lab``, ``python
  tools/render_docs.py``): the module's parser has the subcommands and options (its own
  ``--help``, run in this process), the Makefile the target, the file is there;
- a row or stats field (the row's ``token``, stats ``corrupt``, ``stats.corrupt``): a script
  writes or reads it;
- a call with keyword arguments (``Durability(replicas=1)``, ``work(burst=True)``), in a span
  or a Python block: its target takes each of them;
- a figure given for a named constant (```WAKE_CAP` = 64``, ``100 ms (`POLL_MS`)``): it is the
  constant's value (in a page, or in the package's docstrings).

Shell blocks: ``shell_blocks_unmarked(source)`` lists every ```bash block (or one of ``$``
lines) with no marker on the line before or after it: ``<!-- example: why it is not run -->``
or ``<!-- tested: tests/test_x.py::test_name -->`` (or a whole test module, whose tests run
the block between them; or several, space-separated); a ``tested`` marker must name tests
that are there, and they must run what the block shows: each ``python -m`` command's
subcommands and options, each bench's options, appear in their source as quoted words
(``"server", "start"``), or the block says a command nobody runs. The commands inside every
shell block are checked as above, marked or not.

Nothing here opens a socket or starts a process: the unit tier runs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Objects the prose names by a lower-case variable of their class (``delivery.token``).
INSTANCES = {
    "delivery": "echoq.Delivery",
    "claim": "echoq.Claim",
    "worker": "echoq.Worker",
    "report": "echoq.WorkReport",
    "q": "echoq.Queue",
    "queue": "echoq.Queue",
    "snapshot": "echoq.Snapshot",
    "job": "echoq.Job",
    "effects": "echoq.Effects",
    "keyspace": "echoq.Keyspace",
}
# Paths that are made by running something, not stored: a page may name them.
MADE = ("build/", ".venv/", "echoq-workshop/", "node_modules/", "docs/data/")  # docs/data: tools/store_run.py
EXTENSIONS = (
    ".py", ".lua", ".md", ".ipynb", ".toml", ".yml", ".yaml", ".json", ".sh", ".txt", ".cfg", ".ini", ".png",
    ".csv", ".js", ".css", ".html", ".svg",
)  # fmt: skip
# Spans shaped like paths that are not the checkout's: each with what it is.
NOT_PATHS = {
    "valkey/valkey": "the Docker image",
    "jupyterhub_config.d/": "The Littlest JupyterHub's folder of hub settings, on the class machine",
}
MEDIA = ("image/", "text/", "application/")  # MIME types of a notebook's outputs
SKIP_DIRS = {".git", ".venv", "build", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache"}
SHELL_LANGS = {"bash", "sh", "shell", "console"}
MARKER = re.compile(r"^<!--\s*(example|tested):\s*(.+?)\s*-->$")
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
# "the row's `token`", "rows keep the `reason`", "stats `corrupt`", "counted in stats 'corrupt'".
FIELD_BEFORE = re.compile(r"\b(rows?|stats)(?:'s)?(?:\s+(?:field|counter|counts?|keep|the|its|a|an)){0,3}\s*$")


@dataclass(frozen=True)
class Source:
    """One page or one lesson: its lines as (line number, text), and where its links start."""

    name: str  # as the repository has it: docs/worker.md, notebooks/02_recoverable_claim.ipynb
    lines: tuple[tuple[str, str], ...]  # (where: "12" or "cell 4, line 2", text)
    folder: Path


def sources() -> list[Source]:
    """README.md, docs/*.md and the Markdown cells of every notebook."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [page_source(p) for p in pages]
    found += [notebook_source(p) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    return found


def page_source(path: Path, text: str | None = None) -> Source:
    text = path.read_text() if text is None else text
    lines = tuple((str(n), line) for n, line in enumerate(text.splitlines(), 1))
    return Source(path.relative_to(ROOT).as_posix(), lines, path.parent)


def notebook_source(path: Path) -> Source:
    nb = json.loads(path.read_text())
    lines: list[tuple[str, str]] = []
    for n, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        lines += [(f"cell {n}, line {k}", line) for k, line in enumerate(text.splitlines(), 1)]
    return Source(path.relative_to(ROOT).as_posix(), tuple(lines), path.parent)


# -- the blocks and the spans -------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    lang: str
    where: str  # of the opening fence
    marker: str  # the line before the fence
    lines: tuple[tuple[str, str], ...]
    after: str = ""  # the line after the closing fence

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL_LANGS or (not self.lang and any(text.startswith("$ ") for _, text in self.lines))


def split(source: Source) -> tuple[list[tuple[str, str]], list[Block]]:
    """The prose lines (outside fences) and the fenced blocks."""
    prose: list[tuple[str, str]] = []
    blocks: list[Block] = []
    inside: list[tuple[str, str]] | None = None
    opening = ("", "", "")
    previous = ""
    closed = False  # the line before was a closing fence
    for where, text in source.lines:
        if closed:
            blocks[-1] = dataclasses.replace(blocks[-1], after=text.strip())
            closed = False
        fence = re.match(r"^\s*```\s*(\w*)", text)
        if inside is None and fence:
            inside, opening = [], (fence.group(1), where, previous)
        elif inside is not None and re.match(r"^\s*```\s*$", text):
            blocks.append(Block(opening[0], opening[1], opening[2], tuple(inside)))
            inside, closed = None, True
        elif inside is not None:
            inside.append((where, text))
        else:
            prose.append((where, text))
        if text.strip():
            previous = text.strip()
    return prose, blocks


def spans(prose: list[tuple[str, str]]) -> Iterator[tuple[str, str, str]]:
    """Each code span with its line and the text before it on that line."""
    for where, text in prose:
        for match in SPAN.finditer(text):
            yield where, match.group(1).strip(), text[: match.start()]


# -- what the code has ------------------------------------------------------------------------


@cache
def repository_paths() -> frozenset[str]:
    """Every file and folder of the checkout (relative, posix), without what runs make."""
    found: set[str] = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        rel = Path(folder).relative_to(ROOT).as_posix()
        base = "" if rel == "." else rel + "/"
        if base:
            found.add(base)
        found.update(base + f for f in files)
    return frozenset(found)


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(
        name
        for line in re.findall(r"^([A-Za-z0-9_. -]+):(?!=)", text, flags=re.M)
        for name in line.split()
        if not name.startswith(".")
    )


LUA_HASH_CALL = re.compile(r"redis\.p?call\(\s*'(HSET|HINCRBY|HGET|HMGET|HDEL|HINCRBYFLOAT)'\s*,")


def _call_args(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose first argument starts at ``start``."""
    depth, args, current = 0, [], ""
    for char in text[start:]:
        if char in "({":
            depth += 1
        elif char in ")}":
            if depth == 0:
                break
            depth -= 1
        if char == "," and depth == 0:
            args.append(current.strip())
            current = ""
        else:
            current += char
    return [*args, current.strip()]


@cache
def lua_fields() -> dict[str, frozenset[str]]:
    """The field names the scripts write or read: {'row': ..., 'stats': ...}."""
    fields: dict[str, set[str]] = {"row": set(), "stats": set()}
    for script in [*(ROOT / "lua").rglob("*.lua"), *(ROOT / "echoq" / "teaching" / "lua").rglob("*.lua")]:
        text = re.sub(r"--[^\n]*", "", script.read_text())
        for call in LUA_HASH_CALL.finditer(text):
            key, *rest = _call_args(text, call.end())
            kind = "stats" if "stats" in key else "row" if ("row" in key or "'job:'" in key) else None
            if kind is None:
                continue
            names = rest[0::2] if call.group(1) == "HSET" else rest
            fields[kind].update(m.group(1) for arg in names for m in [re.fullmatch(r"'(\w+)'", arg)] if m)
    return {k: frozenset(v) for k, v in fields.items()}


@cache
def _members(cls: type) -> frozenset[str]:
    names = set(dir(cls))
    for klass in inspect.getmro(cls):
        names.update(getattr(klass, "__annotations__", {}))
    if dataclasses.is_dataclass(cls):
        names.update(f.name for f in dataclasses.fields(cls))
    for klass in inspect.getmro(cls):  # attributes set on the instance (self.x = ...)
        if klass.__module__.startswith("echoq"):
            with contextlib.suppress(OSError, TypeError):
                names.update(re.findall(r"\bself\.(\w+)\s*(?::[^=\n]+)?=(?!=)", inspect.getsource(klass)))
    return frozenset(names)


@cache
def code_words() -> frozenset[str]:
    """Every word of the code, its tests and tools (names, fields, keys)."""
    files = [ROOT / "conftest.py"]
    for folder in ("echoq", "lua", "tools", "bench", "tests"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".lua", ".cjs")]
    planted = ROOT / "tests" / "test_docs_names.py"  # it names what is not there, to see it fail
    return frozenset(word for path in files if path != planted for word in re.findall(r"\w+", path.read_text()))


@cache
def _class_modules() -> dict[str, str]:
    """Each class name the package defines, and the module that defines it (read, not imported;
    the library's module first, so its name wins)."""
    found: dict[str, str] = {}
    files = sorted((ROOT / "echoq").rglob("*.py"), key=lambda p: ("teaching" in p.parts, p.as_posix()))
    for path in files:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for name in re.findall(r"^class (\w+)", path.read_text(), re.M):
            found.setdefault(name, module)
    return found


@cache
def class_named(name: str) -> type | None:
    """The package's class of that name, its module imported only now."""
    module = _class_modules().get(name)
    if module is None:
        return None
    found = getattr(importlib.import_module(module), name, None)
    return found if inspect.isclass(found) else None


def resolve_dotted(name: str) -> str | None:
    """None when ``echoq.a.b.c`` exists; else what is missing."""
    parts = name.split(".")
    module = None
    for n in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        rest = parts[n:]
        break
    if module is None:
        return f"no module {parts[0]}"
    obj: object = module
    for k, attr in enumerate(rest):
        if inspect.isclass(obj) and attr in _members(obj):
            obj = getattr(obj, attr, None)
            if obj is None:
                return None  # a field: its type is not followed further
            continue
        if not hasattr(obj, attr):
            return f"{'.'.join(parts[: len(parts) - len(rest) + k])} has no {attr}"
        obj = getattr(obj, attr)
    return None


# -- the checks --------------------------------------------------------------------------------

IDENT_CHAIN = re.compile(r"^([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)(?:\(.*)?$")


CALL = re.compile(r"(?<![\w.])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\(([^()]*)\)")
METHOD_OWNERS = ("echoq.Queue", "echoq.Worker", "echoq.Effects")  # a bare `work(...)`: a method of one


def callable_named(name: str) -> Any:
    """The package's function, class or method a call in the prose names, or None."""
    head, _, rest = name.partition(".")
    if head == "echoq":
        module_name, _, attr = name.rpartition(".")
        with contextlib.suppress(ImportError):
            return getattr(importlib.import_module(module_name), attr, None)
        return None
    owner = INSTANCES.get(head, "").removeprefix("echoq.") or (head if head[:1].isupper() else "")
    if owner and rest:
        cls = class_named(owner)
        return getattr(cls, rest, None) if cls else None
    if not rest:
        if head[:1].isupper():
            return class_named(head)
        for owner_name in METHOD_OWNERS:
            method = getattr(class_named(owner_name.removeprefix("echoq.")), head, None)
            if method is not None:
                return method
        for module in ("echoq", "echoq.teaching.contrasts"):
            found = getattr(importlib.import_module(module), head, None)
            if found is not None:
                return found
    return None


def check_call(text: str) -> str | None:
    """A call's keyword arguments must be parameters of what it calls (``Durability(replicas=1)``)."""
    for match in CALL.finditer(text):
        given = re.findall(r"(?<![\w.])(\w+)=(?!=)", match.group(2))
        target = callable_named(match.group(1)) if given else None
        if target is None:
            continue
        try:
            params = inspect.signature(target).parameters
        except (TypeError, ValueError):
            continue
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            continue
        unknown = [k for k in given if k not in params]
        if unknown:
            return f"{match.group(1)}() takes no argument {unknown[0]!r}"
    return None


def check_span(span: str, before: str, source: Source) -> str | None:
    """Why the span names something that is not there, or None."""
    if "(" in span and "=" in span:
        why = check_call(span)
        if why:
            return why
    if re.match(
        r"^(?:sudo\s+)?(?:[A-Z_]+=\S*\s+)*(?:python3?|\S*/python3?|make|\.venv/bin/pytest|pytest|bash)\s", span + " "
    ):
        return check_command(span)
    pathlike = "/" in span or span.endswith(EXTENSIONS)
    if re.fullmatch(r"[\w.\-/]+", span) and pathlike and not span.startswith("echoq."):
        return check_path(span, source.folder)
    chain = IDENT_CHAIN.match(span)
    if chain:
        head, rest = chain.group(1), chain.group(2)[1:]
        if head == "echoq":
            why = resolve_dotted(span.split("(")[0])
            return f"{why}" if why else None
        if head == "stats" and re.fullmatch(r"\w+", rest):  # `stats.corrupt`: a counter a script bumps
            return None if rest in lua_fields()["stats"] else f"no script writes or reads the stats field {rest!r}"
        cls_name = INSTANCES.get(head, "").removeprefix("echoq.") or (head if head[0].isupper() else "")
        cls = class_named(cls_name) if cls_name else None
        if cls is None:
            return None  # a name of the prose's own (a variable, a module of Python's): not ours
        attr = rest.split(".")[0]
        return None if attr in _members(cls) else f"{cls.__name__} has no {attr}"
    # `release_many`, `keep_done`, `ChaosReport`: a name the code has
    named = re.fullmatch(r"([a-z][a-z0-9]*_[a-z0-9_]+|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+)(?:\(\))?", span)
    if named and named.group(1) not in code_words():
        return f"the code has no name {named.group(1)!r}"
    if re.fullmatch(r"'?\w+'?", span):
        kind = FIELD_BEFORE.search(before)
        if kind:
            which = "stats" if kind.group(1) == "stats" else "row"
            word = span.strip("'")
            if word not in lua_fields()[which]:
                return f"no script writes or reads the {which} field {word!r}"
    return None


def check_path(span: str, folder: Path) -> str | None:
    if span.startswith(MADE + MEDIA + ("/", "~")) or span in NOT_PATHS:
        return None  # made by a run, outside the checkout, not a path at all
    if span.startswith(".") and "/" not in span:
        return None  # an extension: `.lua`
    module, dot, attr = span.rpartition(".")
    if dot and not span.endswith(EXTENSIONS) and (ROOT / f"{module}.py").is_file():  # tests/support/helpers.wait
        return resolve_file_attr(ROOT / f"{module}.py", attr)
    want = span.rstrip("/")
    paths = repository_paths()
    here = (folder / want).resolve()
    if here.exists() and here.is_relative_to(ROOT):
        return None
    if want in paths or want + "/" in paths:
        return None
    if any(p.rstrip("/").endswith("/" + want) for p in paths):
        return None
    if made_by_code(want.removeprefix("./")):
        return None
    return "no such file or folder"


@cache
def _code_text() -> str:
    return "\n".join(p.read_text() for folder in ("echoq", "tools") for p in (ROOT / folder).rglob("*.py"))


def made_by_code(name: str) -> bool:
    """A file a run writes (a workshop's ``roster.json``): its name is a string in the code."""
    return re.search(rf"[\"'/]{re.escape(name.rstrip('/'))}[\"'/]", _code_text()) is not None


def resolve_file_attr(path: Path, attr: str) -> str | None:
    """A name defined at the top of a Python file the package does not import (tests/support)."""
    text = path.read_text()
    if re.search(rf"^(?:def|class|async def)\s+{re.escape(attr)}\b|^{re.escape(attr)}\s*[:=]", text, re.M):
        return None
    return f"{path.relative_to(ROOT)} defines no {attr}"


def _help(module_name: str, argv: list[str]) -> tuple[int, str]:
    """``python -m module argv --help`` in this process (the site's commands page asks the same)."""
    return _help_once(module_name, tuple(argv))


@cache
def _help_once(module_name: str, argv: tuple[str, ...]) -> tuple[int, str]:
    return generated_docs().help_text(module_name, list(argv))


@cache
def generated_docs() -> Any:
    """tools/generated_docs.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("generated_docs", ROOT / "tools" / "generated_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_python_m(words: list[str]) -> str | None:
    """``python -m module [sub ...] [--opt ...]`` against the module's parser."""
    module_name, args = words[0], words[1:]
    if module_name in {"…", "..."} or module_name.startswith("<"):
        return None  # a placeholder: "python -m …"
    try:
        importlib.import_module(module_name)
    except ImportError:
        return f"no module {module_name}"
    if module_name.split(".")[0] != "echoq":
        return None  # another project's command (venv, jupyterhub): importable is what is ours to check
    module = importlib.import_module(module_name)
    if hasattr(module, "__path__") and importlib.util.find_spec(module_name + ".__main__") is not None:
        module = importlib.import_module(module_name + ".__main__")
    if "ArgumentParser" not in inspect.getsource(module):
        return None  # no parser to ask: running it would do its work (a service), not print help
    subs: list[str] = []
    code, text = _help(module_name, [])
    for word in args:
        if word.startswith("-") or word in {"...", "…"} or re.search(r"[<>|]", word):
            break
        choices = re.search(r"\{([\w,-]+)\}", text.split("\n\n")[0])
        if not choices:
            break  # a positional value, not a subcommand
        if word not in choices.group(1).split(","):
            return f"{' '.join([module_name, *subs])} has no subcommand {word!r}"
        subs.append(word)
        code, text = _help(module_name, subs)
    return _options_in_help(" ".join([module_name, *subs]), code, text, args)


def _options_in_help(command: str, code: int, text: str, args: list[str]) -> str | None:
    """Why ``args`` name an option the command's ``--help`` (exit status ``code``) does not list."""
    if code != 0:
        return f"--help of {command} exits {code}"
    for word in args:
        flag = word.split("=")[0]
        if re.fullmatch(r"--[\w-]+", flag) and not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
            return f"{command} has no option {flag}"
    return None


@cache
def _bench_help(stem: str) -> tuple[int, str]:
    gen = generated_docs()
    return gen.module_help(gen.bench_module(stem), f"bench/{stem}.py", [])


def check_bench_options(script: str, args: list[str]) -> str | None:
    """``python bench/x.py --opt``: the bench's parser has each option."""
    path = ROOT / script
    if not (script.startswith("bench/") and path.is_file() and "ArgumentParser" in path.read_text()):
        return None
    return _options_in_help(script, *_bench_help(path.stem), args)


def _command_words(command: str) -> list[str]:
    """A shell command's words from the program on (``VAR=value`` and ``sudo`` before it
    dropped; any path to a python named ``python``)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    while words and (re.fullmatch(r"[A-Z_]+=\S*", words[0]) or words[0] == "sudo"):
        words = words[1:]
    if words and re.search(r"/python3?$", words[0]):  # /opt/tljh/user/bin/python: a python all the same
        words[0] = "python"
    return words


def check_command(command: str) -> str | None:
    words = _command_words(command)
    if not words:
        return None
    tool, args = words[0], words[1:]
    if tool == "make":
        missing = [w for w in args if not w.startswith("-") and "=" not in w and w not in make_targets()]
        return f"the Makefile has no target {missing[0]!r}" if missing else None
    if tool in {"python", "python3", ".venv/bin/python"}:
        if args[:1] == ["-m"] and len(args) > 1:
            return check_python_m(args[1:])
        if args and args[0].endswith(".py"):
            return check_path(args[0], ROOT) or check_bench_options(args[0], args[1:])
        return None
    if tool in {".venv/bin/pytest", "pytest", "bash"}:
        for word in args:
            if re.fullmatch(r"[\w./-]+\.(py|sh)|\.ci/\w+|tests/[\w/]*", word.split("::")[0]):
                why = check_path(word.split("::")[0], ROOT)
                if why:
                    return f"{word.split('::')[0]}: {why}"
        return None
    return None


def commands_in(block: Block) -> Iterator[tuple[str, str]]:
    """Each command a shell block runs (a ``$`` line, or every line of a ```bash block)."""
    prompted = any(text.startswith("$ ") for _, text in block.lines)
    for where, text in block.lines:
        if prompted and not text.startswith("$ "):
            continue
        line = re.sub(r"(^|\s)#.*", "", text.removeprefix("$ ")).strip()
        for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
            if part and not part.startswith("#"):
                yield where, part


@cache
def constants() -> dict[str, float]:
    """Every numeric constant the code defines at the top of a module (``WAKE_CAP = 64``)."""
    found: dict[str, float] = {}
    for folder in ("echoq", "tests/support", "tools", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name, value in re.findall(
                r"^([A-Z][A-Z0-9_]+)(?::[^=\n]+)?\s*=\s*([0-9][0-9_.e+-]*)\s*(?:#.*)?$", path.read_text(), re.M
            ):
                with contextlib.suppress(ValueError):
                    found.setdefault(name, float(value))
    return found


SCALE = {"µs": 1e-6, "ms": 1e-3, "s": 1.0}
CONSTANT_AFTER = re.compile(r"`([A-Z][A-Z0-9_]{2,})`\s*(?:=|,|\()\s*([0-9][0-9,._]*)\s*(µs|ms|s)?\b")
CONSTANT_BEFORE = re.compile(r"([0-9][0-9,._]*)\s*(µs|ms|s)?\s*\(`([A-Z][A-Z0-9_]{2,})`\)")


def check_constant(name: str, number: str, unit: str | None) -> str | None:
    """Why a figure the prose gives for a constant is not the constant's value, or None."""
    value = constants().get(name)
    if value is None:
        return None
    said = float(number.replace(",", "").replace("_", ""))
    if unit and name.endswith("_S"):
        said *= SCALE[unit]
    elif unit and name.endswith("_MS"):
        said *= SCALE[unit] * 1e3
    if abs(said - value) > 1e-9 * max(1.0, abs(value)):
        return f"{name} is {value:g}{' s' if name.endswith('_S') else ' ms' if name.endswith('_MS') else ''}"
    return None


def problems(source: Source) -> list[str]:
    """One line per stale name in the source: ``file:line: `span`: why``."""
    found: list[str] = []
    prose, blocks = split(source)
    for where, text in prose:
        said = [(m.group(1), m.group(2), m.group(3), m.group(0)) for m in CONSTANT_AFTER.finditer(text)]
        said += [(m.group(3), m.group(1), m.group(2), m.group(0)) for m in CONSTANT_BEFORE.finditer(text)]
        for name, number, unit, shown in said:
            why = check_constant(name, number, unit)
            if why:
                found.append(f"{source.name}:{where}: `{shown}`: {why}")
    for where, span, before in spans(prose):
        why = check_span(span, before, source)
        if why:
            found.append(f"{source.name}:{where}: `{span}`: {why}")
    for block in blocks:
        if block.is_shell:
            for where, command in commands_in(block):
                why = check_command(command)
                if why:
                    found.append(f"{source.name}:{where}: `{command}`: {why}")
        elif block.lang == "python":
            for where, text in block.lines:
                why = check_call(text.split("#")[0])
                if why:
                    found.append(f"{source.name}:{where}: `{text.strip()}`: {why}")
                for name in python_names(text):
                    why = check_span(name, "", source)
                    if why:
                        found.append(f"{source.name}:{where}: `{name}`: {why}")
    return found


def python_names(line: str) -> list[str]:
    """The package's names a line of a Python block uses, its comment included: ``echoq.x.y``,
    ``from echoq import X``, ``delivery.job_id, .payload`` (each after the first on the same head)."""
    names = re.findall(r"\bechoq(?:\.\w+)+", line) + _imported(line)
    for head, first, more in re.findall(r"\b([A-Za-z_]\w*)\.(\w+)((?:,\s*\.\w+)*)", line):
        if head in INSTANCES or head in _class_modules():
            names += [f"{head}.{first}"] + [f"{head}{attr.strip(', ')}" for attr in re.findall(r",\s*\.\w+", more)]
    return names


def _imported(line: str) -> list[str]:
    match = re.match(r"\s*from\s+(echoq[\w.]*)\s+import\s+(.+)", line)
    if not match:
        return []
    names = [n.strip().split(" as ")[0] for n in match.group(2).strip("() ").split(",")]
    return [f"{match.group(1)}.{n}" for n in names if re.fullmatch(r"\w+", n)]


def shell_blocks_unmarked(source: Source) -> list[str]:
    """Each shell block that is neither marked an example (with why) nor named as tested."""
    found: list[str] = []
    for block in split(source)[1]:
        if not block.is_shell:
            continue
        marker = MARKER.match(block.marker) or MARKER.match(block.after)
        if not marker:
            found.append(
                f"{source.name}:{block.where}: a shell block with no marker before it: "
                "<!-- example: why it is not run --> or <!-- tested: tests/test_x.py::test_name -->"
            )
        elif marker.group(1) == "tested":
            tests: list[str] = []
            for named in marker.group(2).split():
                test = named_test(named)
                if test is None:
                    found.append(f"{source.name}:{block.where}: marked tested by {named}, which is not there")
                tests.append(test or "")
            for where, command in commands_in(block):
                missing = words_not_run(command, "\n".join(tests))
                if missing:
                    found.append(
                        f"{source.name}:{where}: marked tested by {marker.group(2)}, which never runs "
                        f"{' '.join(missing)} of `{command}`"
                    )
    return found


def named_test(named: str) -> str | None:
    """The source of the test a marker names (``tests/x.py::test_y``), or of its whole module."""
    path, _, test = named.partition("::")
    file = ROOT / path
    if not (path.startswith("tests/") and file.is_file()):
        return None
    text = file.read_text()
    if not test:
        return text if re.search(r"^\s*def test_", text, re.M) else None
    start = re.search(rf"^(\s*)(?:async\s+)?def {re.escape(test)}\b", text, re.M)
    if start is None:
        return None
    end = re.compile(rf"^{start.group(1)}(?:@|def |async def |class )", re.M).search(text, start.end())
    return text[start.start() : end.start() if end else len(text)]


def words_not_run(command: str, tests: str) -> list[str]:
    """The words of a ``python -m`` or bench command (subcommands, options) that no quoted
    string of the tests holds: what the tests cannot be running."""
    words = _command_words(command)
    if len(words) < 2 or words[0] not in ("python", "python3"):
        return []
    if words[1] == "-m":
        args = words[3:]
    elif words[1].startswith("bench/"):
        args = words[2:]
    else:
        return []
    wanted: list[str] = []
    options = False
    for word in args:
        if word.startswith("-"):
            wanted.append(word.split("=")[0])
            options = True
        elif not options and re.fullmatch(r"[a-z][\w-]*", word):
            wanted.append(word)  # a subcommand, until the first option
    quoted = set(re.findall(r"""["']([^"'\s]+)["']""", tests))
    # An option is run too when a test hands its keyword to the function the command calls.
    keywords = set(re.findall(r"\b(\w+)=", tests))
    return [w for w in wanted if w not in quoted and w.lstrip("-").replace("-", "_") not in keywords]


# -- the package's own docstrings --------------------------------------------------------------

RST_SPAN = re.compile(r"``([^`\n]+)``")


def docstring_problems() -> list[str]:
    """The names the package's docstrings and comments give as ``echoq.x.y``, ``from echoq
    import x`` or ``python -m ...``: each must exist (the API reference renders the docstrings)."""
    found: list[str] = []
    for path in sorted((ROOT / "echoq").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        source = Source(rel, (), path.parent)
        for n, line in enumerate(path.read_text().splitlines(), 1):
            plain = RST_SPAN.sub(r"`\1`", line)
            for m in [*CONSTANT_AFTER.finditer(plain), *CONSTANT_BEFORE.finditer(plain)]:
                name, number, unit = (
                    (m.group(1), m.group(2), m.group(3)) if m.re is CONSTANT_AFTER else m.group(3, 1, 2)
                )
                why = check_constant(name, number, unit)
                if why:
                    found.append(f"{rel}:{n}: `{m.group(0)}`: {why}")
            names = [m.group(1) for m in RST_SPAN.finditer(line)] + _imported(line.strip(" #"))
            for name in names:
                if name.startswith("echoq.") or re.match(r"(?:\.venv/bin/)?python3? -m ", name):
                    why = check_span(name, "", source)
                    if why:
                        found.append(f"{rel}:{n}: `{name}`: {why}")
    return found
