"""What the benchmarks share: the machine line, a text table, percentiles, rq's no-op job.

The benchmarks are run as files (``python bench/throughput.py``), so this module is
imported as ``_common``; rq records its job function by that import path.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import redis


def description(doc: str | None) -> str:
    """A bench's --help description: its docstring's first paragraph, whole (a first line
    alone ends mid-sentence)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def register_scripts() -> None:
    """Put the benchmarks' own Lua (bench/ceiling.lua: the raw round-trip ceiling) into the
    library's registry as ``bench/<name>``; registering again does nothing."""
    from pathlib import Path

    from echoq import scripts

    scripts.register("bench", Path(__file__).resolve().parent)


def noop() -> None:
    """The job every benchmark runs: nothing, so the queue's own cost is all that is timed."""


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def server_version(client: redis.Redis) -> str:
    info = client.info("server")
    if "valkey_version" in info:
        return f"Valkey {info['valkey_version']}"
    return f"Redis {info.get('redis_version', '?')}"


def machine(client: redis.Redis | None = None) -> dict[str, Any]:
    """The facts a reader needs to weigh the numbers: cores, Python, server, load."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 0
    facts: dict[str, Any] = {
        "cores": usable,
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "platform": platform.platform(terse=True),
        "redis_py": package_version("redis"),
        "load_average_1m": load_average(),
    }
    if client is not None:
        facts["server"] = server_version(client)
    return facts


def load_average() -> float | None:
    """The 1-minute load average (other work on the machine), where the OS reports one."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def machine_line(facts: dict[str, Any]) -> str:
    parts = [
        f"{facts['cores']} cores",
        facts["python"],
        facts.get("server", ""),
        f"redis-py {facts['redis_py']}",
        f"load {facts['load_average_1m']}" if facts.get("load_average_1m") is not None else "",
    ]
    return ", ".join(p for p in parts if p)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (0 < fraction <= 1) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A plain text table (Markdown-compatible, so it pastes into docs/benchmarks.md or docs/cluster.md as it is)."""
    right = right or [False] * len(headers)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if r else ("-" * (w + 2)) for w, r in zip(widths, right, strict=True))
    return "\n".join([line(headers), rule + "|", *(line(r) for r in rows)])


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1, refused in one line otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
