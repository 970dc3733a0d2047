"""The class hub's Unix users: one per learner, never root nor the hub's own, made only by
root; lessons copied into a home without following what its learner put there. (The hub
itself, with learners as their own users in Chromium, is tests/test_workshop_guide.py.)"""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path

import pytest

from echoq.errors import InvalidArgument
from echoq.teaching.workshop import hub
from echoq.teaching.workshop.spawner import MAX_UNIX_NAME, copy_lessons, refuse_unsafe, system_user

NOBODY = 65534


def test_unix_names_fit_and_never_share_a_user() -> None:
    names = ["ada", "Katherine.Johnson@nasa.gov", "k" * 60, "k" * 61, "x" * 30 + "@a.b", "x" * 30 + "@a.c"]
    made = [system_user(n, "jupyter-") for n in names]
    assert made[0] == "jupyter-ada"
    assert all(len(m) <= MAX_UNIX_NAME and m.startswith("jupyter-") for m in made), made
    assert len(set(made)) == len(made), made


def test_a_learner_who_would_run_as_root_or_as_the_hub_user_is_refused_in_one_line() -> None:
    for entry in (pwd.getpwuid(0), pwd.getpwuid(os.geteuid())):
        with pytest.raises(RuntimeError) as refused:
            refuse_unsafe(entry)
        assert "\n" not in str(refused.value) and "refusing to start a learner's server" in str(refused.value)


@pytest.mark.server
def test_the_hub_refuses_to_start_without_root_in_one_line(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        with pytest.raises(InvalidArgument) as refused:
            hub.prepare(tmp_path)
        message = str(refused.value)
    else:  # as root (CI): the check, run by a child that gave root up
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child)
            os.close(read)
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                hub.prepare(tmp_path)
                os.write(write, b"started")
            except InvalidArgument as exc:
                os.write(write, str(exc).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            message = f.read().decode()
        os.waitpid(child, 0)
    assert "\n" not in message and "only root can do" in message and "sudo" in message, message


def test_lessons_are_copied_without_following_a_learners_symlink_nor_over_their_work(tmp_path: Path) -> None:
    home, outside, lessons = tmp_path / "home", tmp_path / "outside", tmp_path / "lessons"
    for folder in (home, outside, lessons):
        folder.mkdir()
    for name in ("00_a.ipynb", "01_b.ipynb", "02_c.ipynb"):
        (lessons / name).write_text(f"lesson {name}")
    (home / "00_a.ipynb").symlink_to(outside / "planted")  # a learner's trap: root would write there
    (home / "01_b.ipynb").write_text("my own work")
    me = pwd.getpwuid(os.geteuid())
    entry = pwd.struct_passwd((me.pw_name, "x", me.pw_uid, me.pw_gid, "", str(home), "/bin/sh"))
    copy_lessons(sorted(str(p) for p in lessons.iterdir()), entry)
    assert not (outside / "planted").exists()
    assert (home / "01_b.ipynb").read_text() == "my own work"
    assert (home / "02_c.ipynb").read_text() == "lesson 02_c.ipynb"
    assert (home / "02_c.ipynb").stat().st_mode & 0o777 == 0o600


def test_the_hub_answers_the_jupyter_news_question_once_without_following_a_learners_link(tmp_path: Path) -> None:
    from echoq.teaching.workshop.spawner import NEWS_OFF, NEWS_SETTING, news_off

    me = pwd.getpwuid(os.geteuid())
    homes = {name: tmp_path / name for name in ("fresh", "chosen", "trapped")}
    for home in homes.values():
        home.mkdir()
    entry = {name: pwd.struct_passwd((me.pw_name, "x", me.pw_uid, me.pw_gid, "", str(h), "/bin/sh"))
             for name, h in homes.items()}  # fmt: skip
    assert news_off(entry["fresh"])  # a new learner: the setting is written, theirs
    written = homes["fresh"].joinpath(*NEWS_SETTING)
    assert written.read_text() == NEWS_OFF and written.stat().st_mode & 0o777 == 0o600
    chosen = homes["chosen"].joinpath(*NEWS_SETTING)
    chosen.parent.mkdir(parents=True)
    chosen.write_text('{"fetchNews": "true"}')  # their own choice stands
    assert not news_off(entry["chosen"]) and chosen.read_text() == '{"fetchNews": "true"}'
    outside = tmp_path / "outside"
    outside.mkdir()
    (homes["trapped"] / ".jupyter").symlink_to(outside)  # a learner's trap: root would write there
    assert not news_off(entry["trapped"]) and list(outside.iterdir()) == []


@pytest.mark.server
def test_an_existing_account_the_hub_did_not_make_is_never_used_nor_its_home_touched(tmp_path: Path) -> None:
    from echoq.teaching.workshop.spawner import ensure_user

    if os.geteuid() != 0:
        pytest.skip("only root reaches the check (ensure_user makes users)")
    daemon = pwd.getpwnam("daemon")  # /usr/sbin on Debian: chmod 0700 there would break the machine
    mode = os.stat(daemon.pw_dir).st_mode
    with pytest.raises(RuntimeError, match="it is not a learner's user this hub made"):
        ensure_user("daemon", tmp_path)
    assert os.stat(daemon.pw_dir).st_mode == mode


@pytest.mark.server
def test_shared_env_gives_learners_a_python_when_the_venvs_is_under_a_0700_folder() -> None:
    """`make shared-env` (tools/shared-env.sh) is the way out the hub's refusal names, when
    the learners cannot run this venv's Python (pyenv's, under /root): a learner made as the
    hub makes them is refused a Python under a 0700 folder in one line naming it, then runs
    the shared environment's. It makes a Unix user, so it runs where the hub's tests run."""
    import shutil
    import subprocess
    import tempfile

    from echoq.teaching.workshop.spawner import ensure_user
    from tests.support.browser import IN_CI, ROOT
    from tests.support.hub import remove_test_users, session_user_prefix

    if not (IN_CI and os.geteuid() == 0):
        pytest.skip("makes a Unix user: runs as root under CI=true, as the hub's tests do")
    prefix = session_user_prefix()
    shared = Path(tempfile.mkdtemp(prefix="echoq-shared-env-"))
    locked = Path(tempfile.mkdtemp(prefix="echoq-locked-"))  # 0700, as /root is
    try:
        shared.chmod(0o755)
        (shared / "home").mkdir(mode=0o755)
        learner = ensure_user(f"{prefix}py", shared / "home")
        (locked / "python").symlink_to(sys.executable)
        with pytest.raises(InvalidArgument) as refused:
            hub.check_learner_python(str(locked / "python"), learner)
        said = str(refused.value)
        assert "\n" not in said and "learners cannot run the kit" in said and "make shared-env" in said, said

        (shared / "taken").mkdir()
        (shared / "taken" / "theirs").write_text("not ours")
        made = subprocess.run(["bash", "tools/shared-env.sh", str(shared / "taken")], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert made.returncode == 2 and "holds something this did not make" in made.stderr, made.stderr

        made = subprocess.run(["bash", "tools/shared-env.sh", str(shared / "env")], cwd=ROOT, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        assert made.returncode == 0, made.stderr[-2000:]
        python = shared / "env" / "venv" / "bin" / "python"
        assert f"every user can run the kit with {python}" in made.stdout
        hub.check_learner_python(str(python), learner)  # as the learner: no refusal
    finally:
        remove_test_users(prefix)
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(locked, ignore_errors=True)


@pytest.mark.server
def test_a_learners_runtime_folder_is_made_anew_theirs_0700_without_following_what_they_left(tmp_path: Path) -> None:
    from echoq.teaching.workshop.spawner import fresh_runtime, remove_runtime

    if os.geteuid() != 0:
        pytest.skip("only root makes a folder another user's (chown)")
    nobody = pwd.getpwuid(NOBODY)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not theirs to remove")
    base = tmp_path / "run"
    old = base / str(NOBODY)
    old.mkdir(parents=True)
    (old / "echoq").mkdir()
    (old / "echoq" / "password").write_text("left by an earlier user with this uid")
    (old / "elsewhere").symlink_to(outside)  # a learner's trap: root would remove what it points to
    folder = fresh_runtime(base, nobody)
    assert folder == old and list(folder.iterdir()) == []  # nothing inherited
    assert (folder.stat().st_uid, stat_mode(folder), stat_mode(base)) == (NOBODY, 0o700, 0o755)
    assert (outside / "keep").read_text() == "not theirs to remove"
    remove_runtime(folder)
    assert not folder.exists() and (outside / "keep").exists()


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.server
@pytest.mark.parametrize(("options", "said"), [
    ({"memory": "2X"}, "--memory '2X': give a size such as 2G or 512M"),
    ({"memory": "100M"}, "--memory 100M: a learner's JupyterLab needs at least 512M"),
    ({"tasks": 10}, "--tasks 10: a learner's server and kernels need at least 64"),
])  # fmt: skip
def test_a_hubs_caps_are_checked_before_anything_is_written_in_one_line(
    tmp_path: Path, options: dict, said: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        hub.prepare(tmp_path, hub.HubOptions(**options))
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_a_new_users_uid_inherits_none_of_the_kits_folders_in_the_temporary_folder(tmp_path: Path) -> None:
    from echoq.teaching.workshop.spawner import sweep_temp

    if os.geteuid() != 0:
        pytest.skip("only root makes a folder another uid's (chown)")
    left = tmp_path / "echoq-valkey-left"  # an earlier user's server folder, with its password
    left.mkdir(mode=0o700)
    (left / "server.conf").write_text("requirepass theirs\n")
    theirs = tmp_path / "echoq-home-other"
    theirs.mkdir()
    not_kits = tmp_path / "something-else"
    not_kits.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "echoq-link").symlink_to(outside)  # removed, never followed
    for path in (left, left / "server.conf", not_kits):
        os.chown(path, NOBODY, NOBODY)
    os.lchown(tmp_path / "echoq-link", NOBODY, NOBODY)
    gone = sweep_temp(NOBODY, tmp_path)
    assert sorted(p.name for p in gone) == ["echoq-link", "echoq-valkey-left"]
    assert not left.exists() and theirs.exists() and not_kits.exists() and outside.exists()
