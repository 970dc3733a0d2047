"""No password is ever shown: redact() hides any password (every printable character, as
is or percent-encoded) in the user part and in ``password=``, for redis, rediss and unix
URLs; a URL a parser would split inside its password is refused before connecting, so no
host, port or error text can carry a piece of it; reprs and the CLI never show one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from urllib.parse import quote

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

import echoq
from echoq.address import redact
from echoq.server import describe
from tests.support.helpers import throwaway_env

# Every printable character: ASCII from space to '~', and beyond ASCII too.
PASSWORDS = st.text(
    alphabet=st.one_of(
        st.characters(min_codepoint=0x20, max_codepoint=0x7E),
        st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")),
    ),
    min_size=1,
    max_size=24,
)

# (head, tail): the URL is head + password + tail. In the user-part forms the redacted URL
# is head + '***' + tail; after password= everything is hidden (a raw password may hold '&').
USER_FORMS = [
    ("redis://user:", "@cache.example:6379/0"),
    ("redis://:", "@127.0.0.1:6379/0"),
    ("rediss://alice:", "@secure.example:6380/2"),
    ("unix://:", "@/run/valkey/valkey.sock"),
    ("unix://bob:", "@/tmp/v.sock?db=1"),
]
QUERY_FORMS = [
    ("unix:///run/valkey.sock?password=", ""),
    ("unix:///run/valkey.sock?db=0&password=", "&socket_timeout=5"),
    ("redis://cache.example:6379/0?password=", ""),
    ("rediss://h:1/0?PassWord=", "#frag"),
]


def hidden_correctly(url: str, head: str, tail: str, *, exact: bool) -> None:
    """redact(url) is some of head, then '***', then some of tail: nothing of the password
    shows. ``exact``: exactly head + '***' + tail (the password, and only it, is hidden)."""
    out = redact(url)
    at = out.find("***")
    assert at >= 0, (url, out)
    before, after = out[:at], out[at + 3 :]
    assert head.startswith(before) and tail.endswith(after), (url, out)
    if exact:
        assert out == head + "***" + tail, (url, out)


@settings(max_examples=400, deadline=None, database=None)
@given(password=PASSWORDS, form=st.sampled_from(USER_FORMS), encoded=st.booleans())
def test_redact_hides_any_password_in_the_user_part(password: str, form: tuple[str, str], encoded: bool) -> None:
    written = quote(password, safe="") if encoded else password
    head, tail = form
    # A raw password that itself holds 'password=' reads as a query too: more is hidden.
    hidden_correctly(head + written + tail, head, tail, exact="password=" not in written.lower())


@settings(max_examples=400, deadline=None, database=None)
@given(password=PASSWORDS, form=st.sampled_from(QUERY_FORMS), encoded=st.booleans())
def test_redact_hides_any_password_in_the_query(password: str, form: tuple[str, str], encoded: bool) -> None:
    written = quote(password, safe="") if encoded else password
    head, tail = form
    # After password= everything is hidden (a raw password may hold '&' or '#'); a raw
    # '@' reads as the end of a user part too, and hides from the first ':' on.
    hidden_correctly(head + written + tail, head, "", exact="@" not in written)


@pytest.mark.parametrize(
    "password",
    ["pa#ss", "pa?ss", "pa/ss", "p@ss", "a:b", "%zz", "x?password=y", "12#34", "evil.com/abc", "a b", "é#/?@:&="],
)
def test_the_passwords_that_once_leaked_are_hidden(password: str) -> None:
    """The issue's finding: redact() broke on '#', '?' and '/', and `echoq check` printed them."""
    for head, tail in USER_FORMS:
        assert password not in redact(head + password + tail)
    for head, tail in QUERY_FORMS:
        assert password not in redact(head + password + tail)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.server
@settings(max_examples=150, deadline=None, database=None)
@given(password=PASSWORDS)
def test_connect_never_lets_a_parser_turn_a_password_into_a_host(password: str) -> None:
    """A raw password with / ? # @ would make a URL parser take part of it for the host or
    port, which then shows in every connection error. Such a URL is refused before any
    connection; every other one reaches the right host, and its error shows no password."""
    port = closed_port()
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    with pytest.raises(echoq.ServerUnavailable) as refused:
        echoq.connect(url)
    text = str(refused.value)
    assert "\n" not in text and redact(url) in text
    reached = f"cannot reach Valkey at redis://:***@127.0.0.1:{port}/0 (" in text and f"127.0.0.1:{port}." in text
    assert reached or "percent-encoded" in text, text
    if password.isascii() and not any(c in password for c in "@/?#[]"):
        assert reached, text  # nothing ambiguous: it went to the right host
    # Nothing of the password outside the redacted URL -- unless it is a piece of the
    # message's own wording (a password 'redi' is in 'redis://...' of the advice).
    remainder = text.replace(redact(url), "")
    with pytest.raises(echoq.ServerUnavailable) as plain:
        echoq.connect(f"redis://:x@127.0.0.1:{port}/0")
    wording = str(plain.value) + " cannot be split into user, password and host safely percent-encoded"
    if len(password) >= 4 and password not in wording:
        assert password not in remainder


def test_a_percent_encoded_password_with_every_awkward_character_works(client: redis.Redis) -> None:
    kw = client.connection_pool.connection_kwargs
    password = "p@s s/w?o#r%d:&=é"
    user = f"awkward-{os.getpid()}"
    client.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", "~*", "+@all")
    try:
        url = f"redis://{user}:{quote(password, safe='')}@{kw['host']}:{kw['port']}/0"
        connected = echoq.connect(url)
        assert connected.ping()
        assert password not in describe(connected) and password not in repr(connected)
        raw = f"redis://{user}:{password}@{kw['host']}:{kw['port']}/0"
        with pytest.raises(echoq.ServerUnavailable, match="percent-encoded") as refused:
            echoq.connect(raw)
        assert password not in str(refused.value) and "s/w" not in str(refused.value)
    finally:
        client.execute_command("ACL", "DELUSER", user)


@pytest.mark.server
def test_no_repr_shows_the_password() -> None:
    from echoq.server import _throwaway_server

    server = _throwaway_server()
    client = echoq.connect(server.url)
    queue = echoq.Queue("reprs", client)
    for shown in (repr(server), repr(client), repr(client.connection_pool), repr(queue), describe(client)):
        assert server.password not in shown


@pytest.mark.server
@pytest.mark.parametrize("password", ["s3cret#frag", "s3cret?x=1", "s3/cret", "s3cr@t"])
def test_echoq_check_never_prints_a_raw_password(password: str) -> None:
    env = throwaway_env("VALKEY_URL")
    env["VALKEY_URL"] = f"redis://:{password}@127.0.0.1:{closed_port()}/0"
    result = subprocess.run(
        [sys.executable, "-m", "echoq", "check"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    for piece in (password, "s3cret", "s3/cret", "s3cr@t", "cret"):
        assert piece not in result.stderr + result.stdout


@settings(max_examples=200, deadline=None, database=None)
@given(password=PASSWORDS.filter(lambda p: ":" not in p and "@" not in p), encoded=st.booleans())
def test_a_password_written_as_the_bare_user_part_is_hidden(password: str, encoded: bool) -> None:
    written = quote(password, safe="") if encoded else password
    hidden_correctly(
        f"redis://{written}@cache.example:6379/0",
        "redis://",
        "@cache.example:6379/0",
        exact=("password=" not in written.lower()),
    )


@pytest.mark.server
def test_echoq_check_never_prints_a_bare_user_part() -> None:
    env = throwaway_env("VALKEY_URL")
    env["VALKEY_URL"] = f"redis://s3cretbare@127.0.0.1:{closed_port()}/0"
    result = subprocess.run(
        [sys.executable, "-m", "echoq", "check"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "s3cretbare" not in result.stderr + result.stdout
