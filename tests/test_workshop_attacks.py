"""Class chaos from a learner's side: each thing one learner can do to the whole class server,
done for real, and the class back on its feet by itself (the watchdog) within seconds.

A learner may run no Lua of their own on the class server (EVAL, SCRIPT LOAD, FUNCTION are
refused at once: first test). The watchdog stays as the second line of defence, for a
server whose ACL lets someone run Lua: its tests give Ada ``+eval`` to play that someone.

Small numbers keep it fast: scripts answered BUSY after 300 ms, 50 connections per learner,
a Lua heap of 16 MiB. Every wait is a poll with a deadline."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import echoq
from echoq import limits
from echoq.teaching.workshop import Workshop, admin
from echoq.teaching.workshop.watch import Watchdog, last_events

RECOVERS_S = 10.0  # "within a few seconds", with room for a loaded 2-core machine
SETTINGS = {"busy-reply-threshold": "300", "per-learner-connections": "50", "lua-memory": "16mb"}


@pytest.fixture(scope="module")
def klass(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workshop]:
    folder = tmp_path_factory.mktemp("attacked") / "class"
    workshop, _ = admin.up(folder, roster=["ada", "bob"], class_name="attacked", maxmemory="64mb", settings=SETTINGS)
    yield workshop
    admin.down(folder)


@pytest.fixture
def watchdog(klass: Workshop) -> Iterator[Watchdog]:
    dog = Watchdog(Workshop.load(klass.dir), tick_s=0.05, look_s=0.1).start()
    yield dog
    dog.stop()


def until(check: Callable[[], object], what: str, timeout_s: float = RECOVERS_S) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except (redis.RedisError, echoq.EchoqError):
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.02)


def learner(workshop: Workshop, name: str, *, lua: bool = False) -> redis.Redis:
    """The learner's client; with ``lua``, their user first given EVAL (which a class never
    gives: see the module's docstring)."""
    current = Workshop.load(workshop.dir)
    if lua:
        current.admin().execute_command("ACL", "SETUSER", name, "+eval")
    return echoq.connect(current.learner_url(name))


# The attacks by Lua: C calls that hold the server, a heap past any cap, a script
# allowed past maxmemory, a loop. Each is refused before it runs.
OWN_LUA = {
    "string.rep in C": lambda c: c.eval("for i = 1, 30 do local s = string.rep('x', 32 * 2^20) end", 0),
    "a huge heap": lambda c: c.eval("local t = {} for i = 1, 1e6 do t[i] = string.rep('x', 1000) end", 0),
    "allow-oom": lambda c: c.eval("#!lua flags=allow-oom\nreturn redis.call('SET', KEYS[1], 'x')", 1, "emq:{ada.x}:k"),
    "a loop": lambda c: c.eval("while true do end", 0),
    "read-only EVAL": lambda c: c.execute_command("EVAL_RO", "while true do end", 0),
    "SCRIPT LOAD": lambda c: c.script_load("while true do end"),
    "FUNCTION LOAD": lambda c: c.function_load("#!lua name=x\nredis.register_function('f', function() end)"),
}


def test_a_learners_own_lua_is_refused_at_once_and_the_class_never_waits(klass: Workshop) -> None:
    ada, bob = learner(klass, "ada"), learner(klass, "bob")
    for what, attack in OWN_LUA.items():
        with pytest.raises(echoq.PermissionDenied) as refused:
            attack(ada)
        assert "\n" not in str(refused.value) and "user 'ada' may not use the command" in str(refused.value), what
        started = time.monotonic()
        assert bob.ping() and time.monotonic() - started < 1.0, what  # answered at once: nothing ran
        assert bob_works(klass), what  # the library's scripts, by EVALSHA: still there for everyone


def test_payloads_past_the_class_cap_are_refused_and_the_biggest_calls_leave_bob_answered_within_1_s(
    klass: Workshop,
) -> None:
    """Checking a payload's UTF-8 holds the server per byte (1 MiB of non-ASCII text took
    44-96 ms; 40 of them in one claim, seconds): the class's scripts take 64 KiB at most,
    and a call carries at most 16 of them, however many jobs it asks for."""
    cap, most = admin.CLASS_PAYLOAD_BYTES, limits.CALL_PAYLOADS
    ada, bob = learner(klass, "ada"), learner(klass, "bob")
    queue = echoq.Queue("ada.big-payloads", ada)
    queue.reset()
    with pytest.raises(echoq.InvalidPayload, match=f"more than the {cap} allowed") as refused:
        queue.enqueue("x" * (cap + 1))
    assert "\n" not in str(refused.value)
    widest = "é" * (cap // 2)  # non-ASCII, at the cap: the slowest text to check
    with pytest.raises(echoq.InvalidPayload, match="one call may carry"):
        queue.enqueue_many([widest] * (most + 1))
    for _ in range(5):
        queue.enqueue_many([widest] * most)
    planted = queue.snapshot().pending[0]  # and a row swelled by hand to 1 MiB, past the cap
    ada.hset(queue.keys.job(planted), "payload", "é" * (2**19))
    handed: list[int] = []

    def claim_everything() -> None:
        while got := queue.claim_many(1000, lease_ms=60_000):
            handed.append(len(got))

    thread, errors = in_background(claim_everything)
    slowest = 0.0
    while thread.is_alive():
        started = time.monotonic()
        assert bob.ping()
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.005)
    assert errors == [] and sum(handed) == 5 * most - 1 and max(handed) <= most, (errors, handed)
    assert slowest < 1.0, f"bob waited {slowest:.2f} s for a PING"
    assert planted in queue.snapshot().dead  # past the cap: dead-lettered, never handed out
    queue.reset()


def calls(admin_client: redis.Redis) -> dict[str, int]:
    """How many times the server ran each command so far (scripts' commands included)."""
    return {name: int(stat["calls"]) for name, stat in admin_client.info("commandstats").items()}


def test_class_rows_swelled_by_hand_are_dead_lettered_by_their_length_never_read(klass: Workshop) -> None:
    """A learner may write a class queue's row (its shape is the queue's; Valkey runs the
    library's HSET with her rights), so she can swell payloads to 1 MiB by hand. A claim
    measures each payload (HSTRLEN) before it reads one: the swelled rows are dead-lettered
    without a single HGET of theirs, and bob's claim and PINGs are answered at once."""
    ada, bob = learner(klass, "ada"), learner(klass, "bob")
    shared = echoq.Queue(klass.class_queue, ada)
    shared.reset()
    ids = shared.enqueue_many(["ok"] * 20)
    swelled = "x" * 1_000_000
    for job_id in ids:
        ada.hset(shared.keys.job(job_id), "payload", swelled)
    admin_client = klass.admin()
    before = calls(admin_client)
    started = time.monotonic()
    assert echoq.Queue(klass.class_queue, bob).claim_many(20, lease_ms=60_000) == []
    took = time.monotonic() - started
    after = calls(admin_client)
    # Each payload measured (HSTRLEN), none read (HGET is the only command that reads one).
    assert after.get("cmdstat_hstrlen", 0) - before.get("cmdstat_hstrlen", 0) == 20
    assert after.get("cmdstat_hget", 0) == before.get("cmdstat_hget", 0)
    assert set(shared.snapshot().dead) == set(ids)
    started = time.monotonic()
    assert bob.ping() and time.monotonic() - started < 1.0 and took < 1.0, took
    shared.reset()


def test_a_memory_fill_shows_in_status_on_her_row_and_the_documented_command_frees_it(klass: Workshop) -> None:
    """Every key ada can make is in her namespace or the class queue's shape: she fills the
    server with her own keys until writes answer OOM for everyone (bob too); `workshop status`
    shows her memory on her row; `workshop free ada` (docs/WORKSHOP.md) frees it in one command."""
    ada, bob = learner(klass, "ada"), learner(klass, "bob")
    bobs = echoq.Queue("bob.after-the-fill", bob)
    bobs.reset()
    for size in (1_000_000, 1_000):  # MBs, then KBs to the brim: far past the class's 64mb
        with pytest.raises(redis.ResponseError, match="maxmemory"):
            for n in range(100_000):
                ada.set(f"emq:{{ada.fill}}:{size}:{n}", "x" * size)
    with pytest.raises((redis.ResponseError, echoq.EchoqError), match="OOM|maxmemory"):
        bobs.enqueue("x" * 60_000)  # everyone's writes refused (noeviction)
    env = {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "ECHOQ_WORKSHOP")}

    def workshop(*args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "echoq.teaching", "workshop", *args, "--dir", str(klass.dir)]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)

    shown = workshop("status")
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith("ada "))
    assert re.search(r" [4-9]\d\.\dM ", row), row  # tens of MiB, on her row
    freed = workshop("free", "ada")
    assert freed.returncode == 0 and freed.stdout.startswith("freed ada's "), (freed.stdout, freed.stderr)
    assert "M)" in freed.stdout, freed.stdout
    until(lambda: bobs.enqueue("bob's job"), "bob's writes answered again")
    assert not list(klass.admin().scan_iter(match="emq:{ada.fill}:*"))
    row = next(line for line in workshop("status").stdout.splitlines() if line.startswith("ada "))
    assert not re.search(r" \d+\.\dM ", row), row
    bobs.reset()


def test_reloading_the_scripts_leaves_no_moment_without_them(klass: Workshop) -> None:
    """The watchdog's reload (after a Lua heap grew) flushes the script cache and loads every
    script again in one MULTI: bob's moves, meanwhile, never meet NOSCRIPT (whose fallback,
    EVAL, he may not send)."""
    queue = echoq.Queue("bob.reloads", learner(klass, "bob"))
    stop = threading.Event()
    moves = [0]

    def keep_moving() -> None:
        while not stop.is_set():
            queue.snapshot()
            moves[0] += 1

    thread, errors = in_background(keep_moving)
    try:
        with Workshop.load(klass.dir).admin() as admin_client:
            for _ in range(20):
                admin.reload_scripts(admin_client)
                time.sleep(0.002)
    finally:
        stop.set()
        thread.join(RECOVERS_S)
    assert errors == [] and moves[0] > 20, (errors, moves)


def test_a_learners_flood_of_commands_is_named_when_it_starts_and_when_it_ends(
    klass: Workshop, watchdog: Watchdog
) -> None:
    ada, bob = learner(klass, "ada"), learner(klass, "bob")
    bob_works(klass)  # bob's few commands meanwhile: never a flood
    deadline = time.monotonic() + 30
    while not said(watchdog, "is flooding the class server"):  # ada's pipelines of PINGs, until named
        assert time.monotonic() < deadline, [e.what for e in watchdog.events]
        pipe = ada.pipeline(transaction=False)
        for _ in range(2000):
            pipe.ping()
        pipe.execute()
        assert bob.ping()
    line = heard(watchdog, "is flooding the class server")
    assert line.startswith("ada is flooding") and "calls a second" in line, line
    ended = heard(watchdog, "ada's flood ended")
    assert "commands in" in ended, ended
    assert not said(watchdog, "bob is flooding"), [e.what for e in watchdog.events]


def test_a_learner_at_full_library_speed_is_counted_and_never_named_a_flood(
    klass: Workshop, watchdog: Watchdog
) -> None:
    """The library's producer (batches of 16, no pause) and its Worker (no-op jobs) at full
    speed run tens of thousands of commands a second, most inside the scripts: the watchdog
    counts ada's calls (MONITOR) and finds them under the bar; no flood line."""
    from echoq.teaching.workshop.watch import FLOOD_CALLS_PER_S, FLOOD_PER_S

    ada = learner(klass, "ada")
    queue = echoq.Queue("ada.full-speed", ada)
    queue.reset()
    worker = echoq.Worker(echoq.Queue("ada.full-speed", learner(klass, "ada")), lambda _d: None)
    thread, errors = in_background(worker.work)
    watchdog._counted.pop("ada", None)
    deadline = time.monotonic() + 60
    try:
        while "ada" not in watchdog._counted:  # until her commands crossed the first bar and were counted
            assert time.monotonic() < deadline, "ada's commands never passed FLOOD_PER_S: the test proves nothing"
            queue.enqueue_many(["job"] * 16)
    finally:
        worker.stop()
        thread.join(10)
    _when, rate = watchdog._counted["ada"]
    print(f"ada at full library speed: {rate:,.0f} calls a second counted (bar {FLOOD_CALLS_PER_S:,})")
    assert errors == [] and rate < FLOOD_CALLS_PER_S, (errors, rate)
    assert not said(watchdog, "is flooding"), [e.what for e in watchdog.events]
    assert FLOOD_PER_S < FLOOD_CALLS_PER_S
    queue.reset()


def test_up_again_with_other_limits_is_applied_by_the_running_watchdog_and_said(
    klass: Workshop, watchdog: Watchdog
) -> None:
    before = Workshop.load(klass.dir).settings["per-learner-connections"]
    until(lambda: watchdog._looked > float("-inf"), "the watchdog's first look")
    try:
        admin.up(klass.dir, settings={"per-learner-connections": "40"})
        line = heard(watchdog, "settings changed")
        assert f"per-learner-connections {before} -> 40" in line, line
        assert watchdog.per_learner == 40
    finally:
        admin.up(klass.dir, settings={"per-learner-connections": before})
    heard(watchdog, f"per-learner-connections 40 -> {before}")


def raw_url(workshop: Workshop, name: str) -> str:
    """The learner's URL as plain redis-py reads it (the class's payload cap taken out: it
    names which scripts echoq's client calls, and a bare connection calls none)."""
    return Workshop.load(workshop.dir).learner_url(name)


def bob_works(workshop: Workshop) -> bool:
    """Bob, on a connection of his own, runs a kit move: the class goes on."""
    queue = echoq.Queue("bob.lesson-02", learner(workshop, "bob"))
    return queue.enqueue("still here").outcome is echoq.Enqueue.ENQUEUED


def in_background(run: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, errors


def said(dog: Watchdog, *words: str) -> str | None:
    return next((e.what for e in dog.events if all(w in e.what for w in words)), None)


def heard(dog: Watchdog, *words: str) -> str:
    """The watchdog's line with all ``words``, waited for; the failure shows what it did say."""
    try:
        return until(lambda: said(dog, *words), f"the watchdog saying {words}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it said: {[e.what for e in dog.events]}") from None


def test_a_script_that_never_ends_is_killed_and_named(klass: Workshop, watchdog: Watchdog) -> None:
    ada = learner(klass, "ada", lua=True)
    thread, errors = in_background(lambda: ada.eval("while true do end", 0))
    line = heard(watchdog, "BUSY", "SCRIPT KILL")
    assert "ada's script" in line, line
    thread.join(RECOVERS_S)
    assert errors and "killed" in str(errors[0]).lower()
    until(lambda: bob_works(klass), "bob's queue working again")
    assert line in "\n".join(last_events(klass.dir))  # in the log the dashboard and status read
    from echoq.teaching.workshop import views

    dash = views.Dashboard.for_workshop(Workshop.load(klass.dir), auto=False)
    try:
        shown = dash.watchdog_view.value
        assert "Watchdog" in shown and "ended it with SCRIPT KILL" in shown
        assert line.replace("'", "&#x27;") in shown  # the whole line, escaped, not cut
    finally:
        dash.close()


def test_a_script_that_writes_then_loops_restarts_the_server_with_its_settings(
    klass: Workshop, watchdog: Watchdog
) -> None:
    before = Workshop.load(klass.dir)
    ada = learner(klass, "ada", lua=True)
    ada.eval("return 1", 0)  # her connection's last command is a script at the watchdog's next look
    until(lambda: any(c.get("user") == "ada" and c.get("cmd") == "eval" for c in watchdog._clients), "a look")
    thread, _errors = in_background(
        lambda: ada.eval("redis.call('SET', KEYS[1], 'half done') while true do end", 1, "emq:{ada.x}:half")
    )
    line = heard(watchdog, "UNKILLABLE", "restarted")
    assert "ada" in line, line
    until(lambda: bob_works(klass), "bob's queue working on the restarted server")
    after = Workshop.load(klass.dir)
    assert after.port == before.port and after.server_pid != before.server_pid
    config = after.admin().config_get("*")
    # The limits the class was given, not the server's defaults.
    assert config["maxmemory"] == str(64 * 2**20) and config["busy-reply-threshold"] == "300"
    assert config["maxclients"] == after.settings["maxclients"] == str(2 * 50 + 64)
    assert after.admin().exists("emq:{ada.x}:half") == 0  # the script's write was never kept
    thread.join(RECOVERS_S)


def test_a_learners_connections_beyond_the_cap_are_closed(klass: Workshop, watchdog: Watchdog) -> None:
    url = raw_url(klass, "ada")
    held: list[redis.Redis] = []
    for _ in range(200):  # more than the server takes (maxclients 164): everyone else locked out
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
        try:
            client.ping()
        except redis.ConnectionError:
            break
        held.append(client)
    try:
        line = heard(watchdog, "ada had", "closed")
        assert "50 per learner" in line, line
        until(lambda: bob_works(klass), "bob connecting again")
        watcher = Workshop.load(klass.dir).admin()
        until(lambda: [c.get("user") for c in watcher.client_list()].count("ada") <= 50, "ada down to 50")
    finally:
        for client in held:
            client.close()


def test_a_huge_lua_heap_is_flushed(klass: Workshop, watchdog: Watchdog) -> None:
    ada = learner(klass, "ada", lua=True)
    # 40 MiB in a few milliseconds: well within the busy limit, so only the heap check sees it.
    grow = "local t = {} for i = 1, 400 do t[i] = string.rep('x', 100000) .. i end return #t"
    in_background(lambda: ada.eval(grow, 0))
    line = heard(watchdog, "Lua heap", "SCRIPT FLUSH")
    assert "16)" in line or "allows 16" in line, line
    heap = int(Workshop.load(klass.dir).admin().info("memory")["used_memory_vm_eval"])
    assert heap < 16 * 2**20
    until(lambda: bob_works(klass), "bob's kit scripts running (loaded again)")


def test_a_server_that_died_is_started_again_with_its_settings(klass: Workshop, watchdog: Watchdog) -> None:
    before = Workshop.load(klass.dir)
    os.kill(before.server_pid, signal.SIGKILL)  # as a crash, or the kernel's OOM killer, would
    line = heard(watchdog, "had stopped", "restarted")
    assert "maxmemory 64mb" in line and "busy-reply-threshold 300" in line, line
    until(lambda: bob_works(klass), "bob's queue working on the restarted server")
    assert Workshop.load(klass.dir).admin().config_get("maxmemory")["maxmemory"] == str(64 * 2**20)


def test_workshop_status_answers_while_a_script_holds_the_server(klass: Workshop) -> None:
    # No watchdog here: status alone, against a server that answers BUSY.
    ada = learner(klass, "ada", lua=True)
    thread, _ = in_background(lambda: ada.eval("while true do end", 0))
    try:
        lines = until(
            lambda: (out := admin.status(klass.dir)) and any("BUSY" in line for line in out) and out,
            "status saying BUSY",
        )
        assert any("watchdog" in line for line in lines)
    finally:
        Workshop.load(klass.dir).admin(ping=False).script_kill()  # what the docs tell an instructor
        thread.join(RECOVERS_S)


@pytest.mark.server
def test_up_starts_the_watchdog_and_down_stops_it(tmp_path: Path) -> None:
    workshop, lines = admin.up(tmp_path / "w", count=1, class_name="watched", watch=True)
    try:
        assert any("watchdog started" in line for line in lines), lines
        assert admin._process_alive(workshop.watcher_pid)
        until(lambda: "watching the class server" in "\n".join(last_events(workshop.dir)), "the watchdog's first line")
    finally:
        lines = admin.down(tmp_path / "w")
    assert "stopped the class's watchdog" in lines
    assert not admin._process_alive(workshop.watcher_pid)


def test_connections_that_never_authenticate_are_closed_and_named(klass: Workshop, watchdog: Watchdog) -> None:
    import socket

    current = Workshop.load(klass.dir)
    bob = learner(klass, "bob")
    bob.ping()  # his connection, opened before the flood
    held: list[socket.socket] = []
    for n in range(200):  # past maxclients (164): no new connection for anyone meanwhile
        try:
            sock = socket.create_connection(("127.0.0.1", current.port), timeout=2)
        except OSError:
            break
        if n % 10 == 0:  # some log in, then forget it (RESET): as good as never logged in
            password = current.learners["ada"].password
            sock.sendall(f"AUTH ada {password}\r\nRESET\r\n".encode())
        held.append(sock)
    try:
        started = time.monotonic()
        assert bob.ping() and time.monotonic() - started < 1.0  # a connected learner is answered at once
        line = heard(watchdog, "had not authenticated", "closed")
        assert "127.0.0.1" in line, line
        until(lambda: bob_works(klass), "bob connecting again")  # a new connection of his: room again
    finally:
        for sock in held:
            sock.close()


def test_every_event_is_one_line_whatever_it_quotes_and_repeats_are_counted_not_dropped(klass: Workshop) -> None:
    dog = Watchdog(Workshop.load(klass.dir))
    before = len(last_events(klass.dir, 1000))
    dog.say("BUSY: ada's script\n12:00:00 BUSY: bob's script \x1b[31mred\x1b[0m \u202eevil")  # a forged second line
    for _ in range(3):
        dog.say("the class server had stopped; restarted it")
    dog.say("something else")
    lines = last_events(klass.dir, 1000)[before:]
    assert len(lines) == 4, lines
    assert "\x1b" not in lines[0] and "\u202e" not in lines[0] and "bob's script" in lines[0], lines[0]
    assert lines[1].endswith("the class server had stopped; restarted it")
    assert "(the line above 2 more time(s)" in lines[2], lines
    assert lines[3].endswith("something else")


def test_when_the_server_is_crowded_learners_idle_connections_are_closed_and_named(
    klass: Workshop, monkeypatch: pytest.MonkeyPatch
) -> None:
    from echoq.teaching.workshop import watch

    # The class's maxclients is 164: "crowded" brought down to 30% of it (50 connections), so
    # that 49 of ada's (within her share of 50), bob's and the watchdog's crowd it.
    monkeypatch.setattr(watch, "CROWDED", 0.3)
    monkeypatch.setattr(watch, "ROOMY", 0.2)
    url = raw_url(klass, "ada")
    held = [redis.Redis.from_url(url, socket_connect_timeout=2) for _ in range(49)]
    bob = learner(klass, "bob")
    # Valkey counts a connection's idle time in whole seconds: bob, pinging every 50 ms, is
    # never idle 2 s even when a loaded machine holds his loop back for a second.
    dog = Watchdog(Workshop.load(klass.dir), tick_s=0.05, look_s=0.1, idle_s=2)
    try:
        for client in held:
            client.ping()
        admin_client = Workshop.load(klass.dir).admin()
        hers = [c.get("user") for c in admin_client.client_list()].count("ada")  # the earlier tests' too
        dog.start()
        deadline = time.monotonic() + RECOVERS_S + 2
        while not said(dog, "idle for 2 s"):
            assert bob.ping() and time.monotonic() < deadline, [e.what for e in dog.events]  # bob stays busy
            time.sleep(0.05)
        line = said(dog, "idle for 2 s")
        assert "ada" in line and "bob" not in line, line
        assert [c.get("user") for c in admin_client.client_list()].count("ada") < hers
    finally:
        dog.stop()
        for client in held:
            client.close()
