"""ACL refusals, in a script ("ACL failure in script") or on a direct command (NOPERM), are
one typed error, PermissionDenied, whose one line names the user, the command or key that
was refused, and what to do; the command line prints that line and exits 2, never a
traceback. On Valkey and on Redis 7, which word their refusals differently."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import redis

import echoq
from echoq import translation
from echoq.clock import server_now_ms
from echoq.effects import Effects
from tests.support.helpers import throwaway_env

PASSWORD = "learner-pw"


@pytest.fixture
def acl_user(client: redis.Redis) -> Iterator[Callable[..., tuple[redis.Redis, str]]]:
    """Make a user of the test server that may touch only emq:{mine.*, minus some commands;
    returns a connected client and its URL."""
    made: list[str] = []
    kw = client.connection_pool.connection_kwargs

    def make(*rules: str) -> tuple[redis.Redis, str]:
        user = f"learner-{os.getpid()}-{len(made)}"
        client.execute_command("ACL", "SETUSER", user, "reset", "on", f">{PASSWORD}", "~emq:{mine.*", "+@all", *rules)
        made.append(user)
        limited = redis.Redis(host=kw["host"], port=kw["port"], username=user, password=PASSWORD, decode_responses=True)
        return limited, f"redis://{user}:{PASSWORD}@{kw['host']}:{kw['port']}/0"

    yield make
    for user in made:
        client.execute_command("ACL", "DELUSER", user)


@pytest.fixture
def theirs(client: redis.Redis) -> Iterator[echoq.Queue]:
    """Another learner's queue, with a job in it."""
    q = echoq.Queue("theirs.q", client)
    q.reset()
    q.enqueue("someone else's job")
    yield q
    q.reset()


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text and PASSWORD not in text
    return text


def test_a_script_on_another_learners_queue_names_the_queue_and_what_to_do(acl_user, theirs) -> None:
    limited, _url = acl_user()
    user = limited.connection_pool.connection_kwargs["username"]
    q = echoq.Queue("theirs.q", limited)
    for move in (lambda: q.enqueue("x"), lambda: q.claim(), q.snapshot, q.reap, q.stalled_check):
        with pytest.raises(echoq.PermissionDenied) as refused:
            move()
        text = one_line(refused)
        assert f"user {user!r} may not use the keys of queue 'theirs.q' (emq:{{theirs.q}}:*)" in text
        assert "your own namespace" in text and f"grant user {user!r} ~emq:{{theirs.q}}:*" in text
    assert theirs.snapshot().counts["pending"] == 1  # untouched


def test_the_librarys_direct_commands_are_typed_too(acl_user, theirs) -> None:
    limited, _url = acl_user()
    q = echoq.Queue("theirs.q", limited)
    job_id = theirs.snapshot().pending[0]
    with pytest.raises(
        echoq.PermissionDenied, match=rf"Queue.job: user '\S+' may not use the key emq:\{{theirs.q\}}:job:{job_id}"
    ):
        q.job(job_id)
    with pytest.raises(echoq.PermissionDenied, match=r"Queue.reset \(DEL\): .* may not use the key"):
        q.reset()
    with pytest.raises(echoq.PermissionDenied, match=r"Effects.count: .* the key emq:\{theirs.q\}:effects"):
        Effects(q).count(job_id)
    assert theirs.snapshot().counts["pending"] == 1


def test_a_refused_command_is_named_with_the_acl_rule_that_allows_it(acl_user) -> None:
    no_time, _ = acl_user("-time")
    with pytest.raises(echoq.PermissionDenied, match=r"may not use the command TIME .*\+time") as refused:
        server_now_ms(no_time)
    one_line(refused)
    mine = echoq.Queue("mine.no-time", no_time)
    with pytest.raises(
        echoq.PermissionDenied, match=r"claim.lua: user '\S+' may not use (the command TIME|a command it runs)"
    ):
        mine.claim()  # TIME inside the script: Valkey names the command, Redis 7 does not
    no_evalsha, _ = acl_user("-evalsha")
    with pytest.raises(echoq.PermissionDenied, match=r"may not use the command EVALSHA .*ACL SETUSER \S+ \+evalsha"):
        echoq.Queue("mine.no-evalsha", no_evalsha).claim()


def test_a_learner_may_use_their_own_namespace(acl_user) -> None:
    limited, _url = acl_user()
    q = echoq.Queue("mine.q", limited)
    try:
        q.enqueue("mine")
        claim = q.claim()
        assert claim.payload == "mine" and q.complete(claim) is echoq.Complete.COMPLETED
        assert q.job(claim.job_id) is None and q.snapshot().counts["done"] == 1
    finally:
        q.reset()


def run_cli(*args: str, url: str, module: str = "echoq") -> subprocess.CompletedProcess[str]:
    env = throwaway_env("VALKEY_URL")
    env["VALKEY_URL"] = url
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, timeout=120)


def test_the_cli_as_a_restricted_user_prints_one_line(acl_user, theirs) -> None:
    """The issue's finding: `echoq check` as a restricted user printed a 36-line traceback."""
    _client, no_info = acl_user("-info")
    checked = run_cli("check", url=no_info)
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    assert checked.stdout.count("\n") == 1 and "may not run INFO" in checked.stdout
    assert PASSWORD not in checked.stdout

    _client, no_ping = acl_user("-ping")
    refused = run_cli("check", url=no_ping)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("echoq: PING Valkey at redis://")
    assert "may not use the command PING" in refused.stderr and PASSWORD not in refused.stderr

    _client, url = acl_user()
    worker = run_cli("worker", "--queue", "theirs.q", "--burst", url=url, module="echoq.teaching")
    assert worker.returncode == 2 and worker.stdout == "", worker.stdout
    assert worker.stderr.count("\n") == 1 and "Traceback" not in worker.stderr
    # The Worker's first move is its beat's lock (SET NX PX on emq:{theirs.q}:stalled_lock).
    assert "may not use the key emq:{theirs.q}:" in worker.stderr and "~emq:{theirs.q}:*" in worker.stderr


def test_translate_recognises_both_servers_wordings() -> None:
    wordings = [
        redis.exceptions.NoPermissionError("No permissions to access a key"),
        redis.exceptions.NoPermissionError("this user has no permissions to access one of the keys used as arguments"),
        redis.ResponseError("ACL failure in script: No permissions to access a key script: x, on @user_script:1."),
        redis.ResponseError(
            "The user executing the script can't access at least one of the keys mentioned in the command "
            "arguments script: 5a8e, on @user_script:1."
        ),
    ]
    for said in wordings:
        error = translation.translate(said, "claim", keys=["emq:{theirs.q}:pending", "emq:{theirs.q}:active"])
        assert isinstance(error, echoq.PermissionDenied), said
        assert "the keys of queue 'theirs.q'" in str(error) and "@user_script" not in str(error)
