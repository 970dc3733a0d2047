"""Where the Lua comes from, and the text the server runs.

**Folders.** The library's scripts are the ``.lua`` files of ``lua/`` (a built wheel
carries them as ``echoq/lua/``), their shared pieces in ``lua/includes/``. Another package
adds a folder of its own under a prefix with :func:`register` -- the teaching kit its
``teaching/*`` scripts, the benchmark its ``bench/*`` -- so the library ships none of them.
A registered script may include the library's pieces.

**Includes.** A line ``--- @include "includes/name"`` stands for ``lua/includes/name.lua``.
An include declares what it needs with its own ``@include`` lines, and expansion is
recursive: each include's needs are placed before it, each include appears once (a second
request becomes a one-line comment), and a cycle is an error.

**Constants.** A number the Python side needs too (a bound, the wake cap, the clock
margin) is written once, in :data:`echoq.limits.LUA_CONSTANTS`, and a script names it as
``{{NAME}}``: expansion writes the value in its place (``local WAKE_CAP = {{WAKE_CAP}}``
is sent as ``local WAKE_CAP = 64``), so the two sides cannot disagree.

:func:`expanded` returns the whole text, exactly as it is sent to the server -- its SHA1
is the script's SHA -- so what a lesson shows a learner is what the server runs.

**A server's payload cap.** A server may take smaller payloads than the library's bound
(a workshop's class server: 64 KiB, stated in its key ``emq:payload_bytes``). Its scripts
are the same files expanded with that cap in ``BOUNDS`` and a per-call budget of
``CALL_PAYLOADS`` times it (:func:`constants`): other text, another SHA1. A client
of such a server (:func:`echoq.connect` reads the key) carries the cap (:func:`payload_cap`), and every call it
makes names that variant; a server whose admin loaded only that variant runs nothing
else for users who may not send EVAL, so the cap holds whatever their client says.

**Key order.** Every script's header lists its ``KEYS[n]``; :func:`named_keys` reads the
named ones (``emq:{q}:pending`` -> ``pending``) off that header, so the Python side never
spells a script's key list a second time. The named keys of every script come in ONE
order, :data:`KEY_ORDER` (a script takes the ones it needs, in that order), then the rows
of the jobs it is handed.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from itertools import takewhile
from pathlib import Path

from ..errors import InvalidArgument, ScriptFailed
from ..limits import BOUNDS, CALL_PAYLOADS, LUA_CONSTANTS

__all__ = [
    "KEY_ORDER",
    "lua_dir",
    "register",
    "names",
    "raw_source",
    "expanded",
    "sha",
    "named_keys",
    "lua_value",
    "constants",
    "payload_cap",
    "set_payload_cap",
]

_PACKAGE = Path(__file__).resolve().parent.parent  # echoq/
_INCLUDE = re.compile(r'^--- @include "([a-z_/]+)"[ \t]*$', re.MULTILINE)
_NAME = re.compile(r"^[a-z_]+(/[a-z_]+)?$")
_PREFIX = re.compile(r"^[a-z_]+$")
_CONSTANT = re.compile(r"\{\{([A-Z][A-Z0-9_]*)\}\}")
_HEADER_KEY = re.compile(r"KEYS\[(\d+)\]\s+emq:\{\w+\}:([a-z_]+)(?![\w:])")

# The one order of every script's named KEYS (a script takes the ones it needs, in this
# order); the rows of the jobs it is handed follow them.
KEY_ORDER: tuple[str, ...] = ("pending", "active", "scheduled", "dead", "done", "given", "stats", "effects", "outbox")

# Other packages' folders of scripts, by name prefix ("teaching" -> echoq/teaching/lua).
_FOLDERS: dict[str, Path] = {}


@cache
def lua_dir() -> Path:
    """The folder holding the library's ``.lua`` files: installed package data, else the checkout's."""
    for candidate in (_PACKAGE / "lua", _PACKAGE.parent / "lua"):
        if (candidate / "claim.lua").is_file():
            return candidate
    raise FileNotFoundError(
        f"echoq's Lua scripts are missing (looked in {_PACKAGE / 'lua'} and {_PACKAGE.parent / 'lua'}); reinstall echoq"
    )


def register(prefix: str, folder: Path | str) -> None:
    """Add the ``.lua`` files of ``folder`` as scripts named ``prefix/<file>`` (the teaching
    kit's ``teaching/naive_pop``, the benchmark's ``bench/ceiling``). Registering the same
    folder again does nothing; another folder under a taken prefix is refused."""
    folder = Path(folder).resolve()
    if not isinstance(prefix, str) or _PREFIX.match(prefix) is None or prefix == "includes":
        raise InvalidArgument(f"{prefix!r} cannot name a folder of scripts; use lower-case letters and _")
    if not folder.is_dir():
        raise InvalidArgument(f"no folder {folder} to register scripts {prefix}/* from")
    known = _FOLDERS.get(prefix)
    if known is not None and known != folder:
        raise InvalidArgument(f"scripts {prefix}/* come from {known} already, not {folder}")
    _FOLDERS[prefix] = folder


def names() -> list[str]:
    """Every runnable script: ``claim``, ``reap``, ..., and each registered folder's
    (``teaching/naive_pop``, ...); never an include."""
    found = [p.stem for p in lua_dir().glob("*.lua")]
    found += [f"{prefix}/{p.stem}" for prefix, folder in _FOLDERS.items() for p in folder.glob("*.lua")]
    return sorted(found)


def _path(name: str) -> Path:
    if not isinstance(name, str) or _NAME.match(name) is None:
        raise InvalidArgument(f"{name!r} is not a script name; use one of {', '.join(names())}")
    folder, _, stem = name.rpartition("/")
    if folder == "includes" or not folder:
        path = lua_dir() / f"{name}.lua"
    elif folder in _FOLDERS:
        path = _FOLDERS[folder] / f"{stem}.lua"
    else:
        path = None
    if path is None or not path.is_file():
        raise InvalidArgument(f"no script {name!r} in {lua_dir()}; use one of {', '.join(names())}")
    return path


def raw_source(name: str) -> str:
    """A file exactly as written: its ``@include`` lines unexpanded, its ``{{NAME}}`` constants unfilled."""
    return _path(name).read_text()


def lua_value(value: object) -> str:
    """A constant as Lua source: a number, or a table of them (each ``name = {low, high}`` on its line)."""
    if isinstance(value, bool) or not isinstance(value, int | dict):
        raise ScriptFailed(f"{value!r} cannot be written into a script: a whole number or a table of them")
    if isinstance(value, int):
        return str(value)
    rows = [f"  {k} = {{{', '.join(lua_value(x) for x in v)}}}," for k, v in value.items()]
    return "{\n" + "\n".join(rows) + "\n}"


def constants(payload_bytes: int | None = None) -> dict:
    """The values written into the scripts: :data:`echoq.limits.LUA_CONSTANTS`, or, for a
    server with a payload cap, the same with ``BOUNDS.payload_bytes`` ending at the cap and
    ``CALL_PAYLOAD_BYTES`` at ``CALL_PAYLOADS`` times it."""
    if payload_bytes is None:
        return LUA_CONSTANTS
    bounds = dict(LUA_CONSTANTS["BOUNDS"])  # type: ignore[call-overload]
    bounds["payload_bytes"] = (bounds["payload_bytes"][0], check_payload_cap(payload_bytes))
    return {**LUA_CONSTANTS, "BOUNDS": bounds, "CALL_PAYLOAD_BYTES": CALL_PAYLOADS * payload_bytes}


def check_payload_cap(value: object) -> int:
    """A payload cap: a whole number of bytes from 1 to the library's own bound."""
    high = BOUNDS["payload_bytes"][1]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InvalidArgument(
            f"a server's payload cap must be a whole number of bytes from 1 to {high:,}, got {value!r}"
        )
    return value


_CAP = "echoq_payload_bytes"  # the attribute a client carries its server's payload cap in


def payload_cap(client: object) -> int | None:
    """The payload cap of ``client``'s server, as the server stated it (None: the library's bound)."""
    return getattr(client, _CAP, None)


def set_payload_cap(client: object, payload_bytes: int | None) -> None:
    """Note that ``client``'s server runs the scripts of that payload cap (see the module)."""
    setattr(client, _CAP, None if payload_bytes is None else check_payload_cap(payload_bytes))


def _fill(text: str, where: str, values: dict) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ScriptFailed(f"{where}.lua names {{{{{name}}}}}, which echoq.limits.LUA_CONSTANTS does not hold")
        return lua_value(values[name])

    return _CONSTANT.sub(value, text)


@cache
def expanded(name: str, payload_bytes: int | None = None) -> str:
    """The script exactly as the server runs it: every include inlined, once, needs first,
    every ``{{NAME}}`` replaced by its value (for a server with a payload cap of
    ``payload_bytes``: see :func:`constants`)."""
    placed: list[str] = []
    values = constants(payload_bytes)

    def expand(include: str, stack: tuple[str, ...]) -> str:
        if include in stack:
            raise ScriptFailed(f"include cycle in lua/: {' -> '.join(stack + (include,))}")
        text = _fill(_path(include).read_text(), include, values)

        def inline(match: re.Match[str]) -> str:
            needed = match.group(1)
            if needed in placed:
                return f"-- (@include {needed}: already above)"
            body = expand(needed, stack + (include,)).rstrip("\n")
            placed.append(needed)
            return f"-- ---- @include {needed} ----\n{body}\n-- ---- end of {needed} ----"

        return _INCLUDE.sub(inline, text)

    return expand(name, ())


@cache
def sha(name: str, payload_bytes: int | None = None) -> str:
    """The SHA1 the server knows the script by (the SHA1 of :func:`expanded`)."""
    return hashlib.sha1(expanded(name, payload_bytes).encode()).hexdigest()


@cache
def named_keys(name: str) -> tuple[str, ...]:
    """The named KEYS of script ``name`` as its header lists them (``KEYS[1]
    emq:{q}:pending`` ... -> ``('pending', ...)``), without the job rows that follow them.
    Refuses a header whose KEYS are not numbered 1, 2, ... in order."""
    header = "\n".join(takewhile(lambda line: line.startswith("--"), raw_source(name).splitlines()))
    found = [(int(n), key) for n, key in _HEADER_KEY.findall(header)]
    if [n for n, _ in found] != list(range(1, len(found) + 1)):
        raise ScriptFailed(f"{name}.lua's header numbers its named KEYS {[n for n, _ in found]}, not 1, 2, ...")
    return tuple(key for _, key in found)
