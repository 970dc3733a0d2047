"""The instructor's files and folders: `workshop up --dir D` changes and deletes only what it
made; the commands say in one line what is wrong with a file they were given; `make
dashboard` asks for a token."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from echoq.teaching.workshop import admin

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "ECHOQ_WORKSHOP")}
    return subprocess.run(
        [sys.executable, "-m", "echoq.teaching", "workshop", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.server
def test_up_and_down_leave_a_folder_they_did_not_make_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "notes.txt").write_text("the instructor's")
    (folder / admin.SERVER_DIR).mkdir()
    (folder / admin.SERVER_DIR / "keep.txt").write_text("also the instructor's")
    workshop, lines = admin.up(folder, count=1, class_name="lent")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # never chmodded
    assert any("was there before" in line for line in lines), lines
    assert stat.S_IMODE((folder / admin.STATE_FILE).stat().st_mode) == 0o600
    admin.down(folder)
    assert folder.is_dir() and (folder / "notes.txt").read_text() == "the instructor's"
    assert (folder / admin.SERVER_DIR / "keep.txt").is_file()
    left = sorted(p.name for p in folder.iterdir())
    assert left == ["notes.txt", admin.SERVER_DIR], left
    assert sorted(p.name for p in (folder / admin.SERVER_DIR).iterdir()) == ["keep.txt"]
    # An empty folder that was there before stays too.
    empty = tmp_path / "empty"
    empty.mkdir()
    admin.up(empty, count=1, class_name="lent2")
    admin.down(empty)
    assert empty.is_dir() and list(empty.iterdir()) == []


@pytest.mark.server
def test_a_folder_up_made_is_0700_and_down_removes_it(tmp_path: Path) -> None:
    folder = tmp_path / "made" / "class"
    admin.up(folder, count=1, class_name="made")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    admin.down(folder)
    assert not folder.exists() and (tmp_path / "made").is_dir()


@pytest.mark.server
def test_a_roster_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    roster = tmp_path / "roster.txt"
    roster.write_bytes(b"ada\n\xff\xfebob\n")
    done = cli("up", "--dir", str(tmp_path / "w"), "--roster", str(roster))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "is not UTF-8 text" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "w").exists()  # nothing made


@pytest.mark.server
@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"dir": 1}', b"[]"])
def test_a_corrupt_workshop_json_is_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / admin.STATE_FILE).write_bytes(content)
    for action in ("status", "down", "up"):
        done = cli(action, "--dir", str(tmp_path))
        assert done.returncode == 2, (action, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert "is not a workshop state" in done.stderr
    assert (tmp_path / admin.STATE_FILE).read_bytes() == content  # left for the instructor to look at


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _status(url: str) -> tuple[int, str]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # noqa: ANN002, ANN003
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=60) as reply:
            return reply.status, reply.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location", "")


@pytest.mark.server
def test_make_dashboard_asks_for_a_token_and_prints_the_url_with_it(tmp_path: Path) -> None:
    port = _free_port()
    dry = subprocess.run(
        ["make", "-s", "-n", "dashboard", f"DASHBOARD_PORT={port}", f"BIN={Path(sys.executable).parent}"]
        + [f"ECHOQ_WORKSHOP={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert dry.returncode == 0, dry.stderr
    recipe = dry.stdout.replace("\\\n", " ")
    (command,) = [line for line in recipe.splitlines() if "/voila " in line]
    argv = shlex.split(command)
    assert "--token" in argv  # Voila makes the token: it is never on a command line `ps` shows
    assert not any(arg.startswith(("--token=", "--Voila.token", "--IdentityProvider.token")) for arg in argv)
    log = tmp_path / "voila.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            ["bash", "-c", command], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 90
        while not (found := re.search(rf"http://127\.0\.0\.1:{port}/\?token=(\w+)", log.read_text())):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        token = found.group(1)
        code, where = _status(f"http://127.0.0.1:{port}/")
        assert code in (302, 403) and (code == 403 or "/login" in where), (code, where)
        code, page = _status(f"http://127.0.0.1:{port}/?token={token}")
        assert code == 200 and "echoq" in page, code
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(15)


def _servers_in(folder: Path) -> list[int]:
    """valkey-server processes whose working folder is in ``folder`` (what a failed `up` must not leave)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if "valkey-server" in (entry / "comm").read_text() and str(folder) in os.readlink(entry / "cwd"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


BAD_OPTIONS = {
    "a port past 65535": ["up", "--count", "1", "--port", "70000"],
    "a negative port": ["up", "--count", "1", "--port", "-1"],
    "a bind that is no address": ["up", "--count", "1", "--bind", "999.1.1.1"],
    "no learner": ["up", "--count", "0"],
    "a class name with a space": ["up", "--count", "1", "--class", "Bad Name"],
    "a hub port past 65535": ["hub", "--port", "70000"],
    "a tick below zero": ["watch", "--tick", "-1"],
}


@pytest.mark.server
@pytest.mark.parametrize("what", list(BAD_OPTIONS))
def test_a_bad_option_is_one_line_and_exit_2_and_starts_nothing(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from echoq.teaching.__main__ import main

    folder = tmp_path / "class"
    action, *rest = BAD_OPTIONS[what]
    assert main(["workshop", action, "--dir", str(folder), *rest, *(["--no-watch"] if action == "up" else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("echoq: ") and "\n" not in err and "Traceback" not in err, err
    assert not (folder / admin.STATE_FILE).exists() and _servers_in(tmp_path) == []


@pytest.mark.server
def test_up_again_with_other_options_applies_them_or_says_it_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from echoq.teaching.__main__ import main

    folder = tmp_path / "class"
    workshop, _ = admin.up(folder, count=1)
    try:
        other = 1 + workshop.port % 60000
        again = ["workshop", "up", "--dir", str(folder), "--no-watch"]
        assert main([*again, "--port", str(other), "--bind", "127.0.0.2", "--host", "10.1.2.3"]) == 0
        out = capsys.readouterr().out
        assert f"not applied: --port {other}" in out and "not applied: --bind '127.0.0.2'" in out, out
        assert "applied: --host 10.1.2.3" in out, out
        now = admin.Workshop.load(folder)
        assert now.port == workshop.port and now.host == "10.1.2.3" and "@10.1.2.3:" in now.learner_url("learner-01")
        assert main([*again, "--url", "redis://127.0.0.1:1"]) == 2  # a started class is not moved by --url
        assert "workshop down` first" in capsys.readouterr().err
    finally:
        admin.down(folder)
