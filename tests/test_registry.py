"""The registry's single sources: constants written once (Python) and filled into the Lua,
one key order, and each script's KEYS read off its own header.

Most of these need no server: they read the files and the expanded text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import echoq
from echoq import limits, scripts
from echoq.queue import SCRIPT_KEYS

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = [n for n in scripts.names() if "/" not in n]
INCLUDES = sorted(f"includes/{p.stem}" for p in (scripts.lua_dir() / "includes").glob("*.lua"))


def _code(text: str) -> str:
    """A Lua text without its comment lines."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


def _literals(value: object) -> set[str]:
    if isinstance(value, dict):
        return {str(n) for pair in value.values() for n in pair} - {"0", "1"}
    return {str(value)}


@pytest.mark.parametrize("name", LIBRARY + INCLUDES)
def test_no_script_writes_a_constant_of_echoq_limits_as_a_literal(name: str) -> None:
    """A constant has one source: a script names it {{NAME}} (or reads BOUNDS), never repeats
    its value, so changing it in echoq/limits.py changes every script."""
    code = re.sub(r"[*/] 1000\b", "", _code(scripts.raw_source(name)))  # seconds <-> ms is no bound
    for constant, value in limits.LUA_CONSTANTS.items():
        for literal in _literals(value):
            assert not re.search(rf"(?<![\w.]){literal}(?![\w.])", code), (
                f"{name}.lua writes {literal} (from {constant}) in its code; name {{{{{constant}}}}} instead"
            )


def test_the_expanded_scripts_carry_the_values_of_echoq_limits() -> None:
    claim, enqueue, stalled = (scripts.expanded(n) for n in ("claim", "enqueue", "stalled_check"))
    bounds = "\n".join(f"  {k} = {{{lo}, {hi}}}," for k, (lo, hi) in limits.BOUNDS.items())
    assert f"local BOUNDS = {{\n{bounds}\n}}\n" in claim
    assert f"\nlocal CLOCK_AHEAD_MS = {limits.CLOCK_AHEAD_MS}\n" in enqueue
    assert f"\nlocal WAKE_CAP = {limits.WAKE_CAP}\n" in enqueue
    assert f"\nlocal UNSTARTED_MAX = {limits.UNSTARTED_MAX}\n" in stalled
    for name in scripts.names():
        assert not re.search(r"\{\{[A-Z]", scripts.expanded(name)), f"{name}: a constant was left unfilled"


def test_a_servers_payload_cap_is_its_own_variant() -> None:
    """A server loaded for a payload cap runs other text (another SHA1): a client told the
    cap (the server states it: tests/test_workshop.py) calls that variant, any other the library's."""
    capped = scripts.expanded("claim", 65536)
    assert "payload_bytes = {0, 65536}," in capped and "local CALL_PAYLOAD_BYTES = 1048576\n" in capped
    assert f"local CALL_PAYLOAD_BYTES = {limits.CALL_PAYLOAD_BYTES}\n" in scripts.expanded("claim")
    assert scripts.sha("claim", 65536) != scripts.sha("claim")
    with pytest.raises(echoq.InvalidArgument, match="from 1 to 1,048,576"):
        scripts.expanded("claim", 2**21)


def test_a_changed_constant_changes_the_script_the_server_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drift test: the value in echoq/limits.py is what the server gets, and a script's
    SHA1 follows it (the registry caches expansions, so the cache is cleared around it)."""
    before = scripts.sha("enqueue")
    monkeypatch.setitem(limits.LUA_CONSTANTS, "WAKE_CAP", limits.WAKE_CAP + 1)
    scripts.expanded.cache_clear()
    scripts.sha.cache_clear()
    try:
        assert f"local WAKE_CAP = {limits.WAKE_CAP + 1}\n" in scripts.expanded("enqueue")
        assert scripts.sha("enqueue") != before
    finally:
        monkeypatch.undo()
        scripts.expanded.cache_clear()
        scripts.sha.cache_clear()
    assert scripts.sha("enqueue") == before


def test_an_unknown_constant_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from echoq.scripts import registry

    monkeypatch.setattr(registry, "_FOLDERS", dict(registry._FOLDERS))  # the probe folder goes after the test
    (tmp_path / "probe.lua").write_text("-- probe.lua\nreturn {{NO_SUCH}}\n")
    scripts.register("probe", tmp_path)
    with pytest.raises(echoq.ScriptFailed, match=r"probe/probe.lua names \{\{NO_SUCH\}\}"):
        scripts.expanded("probe/probe")


def test_every_script_lists_its_named_keys_in_the_one_key_order() -> None:
    for name in scripts.names():
        keys = scripts.named_keys(name)
        if not set(keys) <= set(scripts.KEY_ORDER):
            continue  # the kit's bank: not a queue's keys
        assert list(keys) == sorted(keys, key=scripts.KEY_ORDER.index), (name, keys)


_CHECKED = re.compile(r"(?:queue_prefix|named_prefix)\(\{([^}]*)\}|^local NAMES = \{([^}]*)\}", re.M)


@pytest.mark.parametrize("name", scripts.names())
def test_each_script_checks_the_keys_its_header_lists(name: str) -> None:
    """What the Lua refuses (queue_prefix / named_prefix) is the header's list, in its order."""
    found = _CHECKED.findall(_code(scripts.raw_source(name)))
    if not found:
        assert name.startswith("bench/"), f"{name}.lua checks no KEYS"
        return
    checked = tuple(re.findall(r"'(\w+)'", found[0][0] or found[0][1]))
    assert checked == scripts.named_keys(name)


def test_script_keys_are_the_headers() -> None:
    assert SCRIPT_KEYS == {n: scripts.named_keys(n) for n in LIBRARY} and set(SCRIPT_KEYS) == set(LIBRARY)


def test_every_key_a_python_caller_passes_is_the_one_the_header_names(
    monkeypatch: pytest.MonkeyPatch, queue: echoq.Queue
) -> None:
    """Every script the library and the kit run, through the one registry call: the named
    KEYS each caller passes are, in order, the keys its script's header lists."""
    from echoq.teaching import contrasts
    from echoq.teaching.bank import Bank
    from echoq.teaching.fast_forward import fast_forward

    seen: dict[str, list[str]] = {}
    real = scripts.run

    def recording(client: object, name: str, keys: list[str], args: list[object]) -> object:
        seen.setdefault(name, list(keys))
        return real(client, name, keys, args)

    monkeypatch.setattr(scripts, "run", recording)  # every caller runs scripts.run(...)
    effects = echoq.Effects(queue)
    queue.enqueue("a")
    queue.enqueue_many(["b", "c", "d"])
    one = queue.claim(lease_ms=60_000)
    effects.apply_once(one.job_id, "x")
    queue.extend(one, lease_ms=60_000)
    queue.extend_many([one], lease_ms=60_000)
    queue.complete(one)
    two, three = queue.claim_many(2, lease_ms=60_000)
    queue.retry(two, error="boom", max_attempts=5)
    queue.release_many([three])
    queue.complete_many_and_claim([], count=1, lease_ms=60_000)
    queue.reap()
    queue.stalled_check()
    queue.snapshot()
    queue.waiting()
    queue.requeue_dead([two.job_id])
    queue.purge_dead([two.job_id])
    contrasts.naive_pop(queue)
    contrasts.apply_every(effects, one.job_id, "y")
    fast_forward(queue, 1_000)
    bank = Bank(queue.client, queue.name)
    try:
        bank.charge("card-1", 500)
    finally:
        bank.reset()
    assert set(LIBRARY) | {f"teaching/{p.stem}" for p in (ROOT / "echoq" / "teaching" / "lua").glob("*.lua")} <= set(
        seen
    ), set(LIBRARY) - set(seen)
    for name, keys in seen.items():
        named = scripts.named_keys(name)
        tails = tuple(key.rsplit(":", 1)[1] for key in keys[: len(named)])
        assert tails == named, (name, keys)
        assert all(":job:" in key for key in keys[len(named) :]), (name, keys)


@pytest.mark.parametrize("name", [n for n in scripts.names() if not n.startswith(("bench/", "teaching/bank"))])
def test_every_script_checks_its_numbers_through_the_one_argument_helper(name: str) -> None:
    """checked_args (lua/includes/args.lua) checks a script's arguments and returns the
    refusal; no script checks an ARGV number by hand."""
    code = _code(scripts.raw_source(name))
    assert "whole(ARGV" not in code and "tonumber(ARGV" not in code, name
    if re.search(r"^-- ARGV\[\d+\]\s+.*\d+\.\.\d+", scripts.raw_source(name), re.M):
        assert "checked_args(" in code or "id_attempt_pairs(" in code, name
