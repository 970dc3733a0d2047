"""Shared test helpers: waiting on the server's clock, and the one-place invariant."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import redis

import echoq
from echoq import scripts
from echoq.clock import server_now_ms, wait_for_server_ms

# A terminal colour code, as IPython puts them into a traceback's text.
ANSI = re.compile(r"\x1b\[[0-9;]*m")

__all__ = ["server_now_ms", "wait_for_server_time", "expire", "places", "assert_one_place"]


def throwaway_env(*dropped: str) -> dict[str, str]:
    """This process's environment without ``dropped`` (``VALKEY_URL``, say), for a child
    process that starts a throwaway server of its own: the suite never uses the user
    server (the library's default) by accident."""
    return {k: v for k, v in os.environ.items() if k not in dropped} | {"ECHOQ_VALKEY": "throwaway"}


def wait_for_server_time(client: redis.Redis, target_ms: int, timeout_s: float = 5.0) -> None:
    """Wait on the server's clock (leases are judged on it); a stuck clock fails the test."""
    if not wait_for_server_ms(client, target_ms, timeout_s):
        raise AssertionError(f"server clock did not reach {target_ms} within {timeout_s} s")


def expire(queue: echoq.Queue, *claims: echoq.Claim) -> None:
    """Wait until every given claim's lease deadline has passed on the server."""
    wait_for_server_time(queue.client, max(c.deadline_ms for c in claims) + 1)


def places(snapshot: echoq.Snapshot) -> dict[str, list[str]]:
    """Every listed id -> the places it appears in (should always be exactly one)."""
    seen: dict[str, list[str]] = {}
    for name, members in (
        ("pending", snapshot.pending),
        ("active", snapshot.active),
        ("scheduled", snapshot.scheduled),
        ("dead", snapshot.dead),
        ("done", snapshot.done),
    ):
        for job_id in members:
            seen.setdefault(job_id, []).append(name)
    return seen


def assert_one_place(queue: echoq.Queue, known: set[str]) -> echoq.Snapshot:
    """Every id ever enqueued is in exactly one of pending/active/scheduled/dead/done,
    and every live row's state names the set it is in."""
    snap = queue.snapshot(limit=10_000)
    seen = places(snap)
    lost = known - seen.keys()
    assert not lost, f"lost jobs: {sorted(lost)}"
    doubled = {job_id: where for job_id, where in seen.items() if len(where) != 1}
    assert not doubled, f"jobs in two places: {doubled}"
    for job_id, row in snap.rows.items():
        assert row.state == seen[job_id][0], f"{job_id} is in {seen[job_id][0]} but its row says {row.state}"
    return snap


def redeliver(queue: echoq.Queue, deliveries: int, apply) -> str:
    """Deliver one job `deliveries` times: each worker does the effect, then dies before
    completing; the lease expires and the reaper hands the job to the next worker."""
    job = queue.enqueue("charge card").job_id
    for n in range(1, deliveries + 1):
        claim = queue.claim(lease_ms=5)
        assert claim.job_id == job and claim.token == n
        apply(job, f"delivery {n}")
        expire(queue, claim)  # the worker is gone: no complete
        assert queue.reap() == [job]
    return job


def register_kit_scripts() -> None:
    """Register the kit's Lua folder by path, as the kit does on import: the library's tests
    import no kit module, and what the registry holds must not depend on which test file
    happened to import the kit first in this process."""
    scripts.register("teaching", Path(__file__).resolve().parents[2] / "echoq" / "teaching" / "lua")


# `make setup` puts uv beside the venv's python. It installs what pip would, from the same
# index with the same build backend, for a fraction of pip's CPU (resolving and building
# with pip took 5-10 s of CPU per install on 2 cores); where it is missing, pip does.
UV = Path(sys.executable).with_name("uv")


def install_command(python: str | Path, *args: str) -> list[str]:
    """The command that installs ``args`` into ``python``'s environment (uv, else pip)."""
    if UV.is_file():
        return [str(UV), "pip", "install", "-q", "--python", str(python), *args]
    return [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]


def create_venv(home: Path) -> Path:
    """A new, empty venv at ``home`` (uv's when it is there, else the standard library's
    with pip in it); its python."""
    import subprocess
    import venv

    if UV.is_file():
        subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(home)], check=True, timeout=120)
    else:
        venv.EnvBuilder(with_pip=True).create(home)
    return home / "bin" / "python"


# What an installer prints when no package index answers (pip, uv): outside CI, a skip.
NO_INDEX = ("Could not find a version", "Failed to fetch", "No solution found")


def unwrapped(page: str) -> str:
    """A workshop page's HTML without the marks that keep its words whole on screen
    (``echoq.teaching.workshop.html.keep_words``): what it says, as written."""
    import re

    return re.sub(r"<span class='w'>([^<]*)</span>", r"\1", page.replace("<wbr>", ""))


def dump(q: echoq.Queue) -> dict[str, bytes]:
    """Every key of the queue, serialised exactly (DUMP): equal before and after a call that
    changed nothing."""
    return {key: q.client.dump(key) for key in sorted(q.keys_in_use())}


def run_in_own_loop(main):  # noqa: ANN001, ANN201 (a coroutine function; what it returns)
    """``asyncio.run(main())`` in a thread of its own: a test before this one in the same
    process may have left an event loop running in the main thread, where asyncio.run()
    refuses to start."""
    import asyncio
    import threading

    done: list = []

    def run() -> None:
        try:
            done.append((True, asyncio.run(main())))
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            done.append((False, exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(120)
    assert done, "the coroutine did not end in 120 s"
    ok, value = done[0]
    if not ok:
        raise value
    return value
