"""The class hub's spawner: one learner, one Unix user, as The Littlest JupyterHub does.

JupyterHub's ``LocalProcessSpawner`` starts each server as the Unix user of the same name
(``setuid`` between fork and exec), so the hub runs as root. Here the Unix user is
``<prefix><learner id>`` (``jupyter-ada``; a name too long for Unix is cut and given a
short hash of the whole, as TLJH does), made with ``useradd`` when it is missing, with a
home of mode 0700 in ``homes`` (``/home`` by default). Nothing of the class's secrets is
in a home: the workshop folder, the hub's database, cookie secret and passwords stay the
instructor's (root's), mode 0600. A learner's server gets only what the hub gives any
server plus the workshop snippet's ``VALKEY_URL`` (their own).

Each learner's processes are capped (:func:`cap`, set as root before the server runs as
them, inherited by every kernel and process it starts): ``mem_limit`` bytes of writable
memory per process (``RLIMIT_DATA``: an allocation past it is refused, a ``MemoryError`` in
that learner's cell), ``tasks_limit`` processes and threads for their Unix user at once
(``RLIMIT_NPROC``: one more ``fork`` fails, for them only), and niceness ``nice`` (their
busy loops yield to the hub and the class server).

Each learner's runtime folder, ``/run/echoq/<uid>`` (:func:`fresh_runtime`: made anew, mode
0700, theirs, before each start; removed when their server stops), holds their kernels'
connection files and unix sockets (the kit's hub runs kernels on ``ipc``, never TCP: see
:mod:`.kernel`) and their private servers (:func:`echoq.server.private_home`): no other
user can connect to any of them, and nothing of theirs outlives their server there.

A spawner that would start a learner as the hub's own user or as root refuses, in one line.
Lessons are copied into the home before each start without following anything the learner
put there (``O_CREAT|O_EXCL|O_NOFOLLOW``, then owned by the learner): a learner's symlink
cannot make root write elsewhere. The same way, JupyterLab's "Jupyter news" question is
answered for them once (``fetchNews`` off in their user settings, unless they set it): the
class is offline, and a pop-up over the lesson helps nobody.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from traitlets import Integer, List, Unicode

from ..learner import from_hub_user

__all__ = [
    "ClassSpawner", "system_user", "ensure_user", "copy_lessons", "refuse_unsafe", "news_off", "cap", "fresh_runtime",
    "sweep_temp",
]  # fmt: skip

MAX_UNIX_NAME = 32  # useradd's limit on Linux


def sweep_temp(uid: int, folder: str | Path | None = None) -> list[Path]:
    """Remove the kit's folders (``echoq-*``) in the temporary folder that ``uid`` owns: a
    user made now with a uid an earlier user had must not find that user's servers, their
    passwords and data (a throwaway server of an older kit, a process killed before its
    clean-up). Links are removed, never followed. The paths removed."""
    import tempfile

    gone = []
    for path in Path(folder or tempfile.gettempdir()).glob("echoq-*"):
        try:
            if path.lstat().st_uid != uid:
                continue
            if path.is_symlink() or not path.is_dir():
                path.unlink()
            else:
                shutil.rmtree(path)
            gone.append(path)
        except OSError:
            continue  # gone meanwhile, or not ours to remove: the next sweep tries again
    return gone


def system_user(hub_user: str, prefix: str = "jupyter-") -> str:
    """The Unix user a hub user's server runs as: the prefix and their learner id, cut to
    fit with a hash of the whole name when it is long (two users never share one)."""
    name = prefix + from_hub_user(hub_user)
    if len(name) <= MAX_UNIX_NAME - 6:
        return name
    return f"{name[: MAX_UNIX_NAME - 6]}-{hashlib.sha256(name.encode()).hexdigest()[:5]}"


def ensure_user(name: str, homes: str | Path) -> pwd.struct_passwd:
    """The Unix user ``name``, made (no login shell, a group of its own, a home of mode 0700
    in ``homes``) when it does not exist; a new user inherits nothing the kit left in the
    system's temporary folder under the same uid (:func:`sweep_temp`)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        home = Path(homes) / name
        subprocess.run(
            ["useradd", "--create-home", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", "--user-group", name],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(name)
        sweep_temp(entry.pw_uid)
    home = Path(entry.pw_dir)
    if home.parent.resolve() != Path(homes).resolve():
        # An account this hub did not make (its home is elsewhere: /usr/sbin, /root, ...):
        # never run a learner as it, never touch its home.
        raise RuntimeError(
            f"Unix user {name!r} exists with its home at {home}, outside {homes}: it is not a learner's user "
            "this hub made; choose another --user-prefix"
        )
    home.mkdir(mode=0o700, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    home.chmod(0o700)
    return entry


def refuse_unsafe(entry: pwd.struct_passwd) -> None:
    """One line, and no server, when the learner would run as root or as the hub's own user."""
    if entry.pw_uid == 0 or entry.pw_uid == os.geteuid():
        raise RuntimeError(
            f"refusing to start a learner's server as Unix user {entry.pw_name!r} (uid {entry.pw_uid}): "
            "that is root or the hub's own user, who can read every class secret; give each learner a user of their own"
        )


def copy_lessons(notebooks: list[str], entry: pwd.struct_passwd) -> None:
    """Copy each notebook into the learner's home unless a file (or anything) of that name is
    there: their own work is never overwritten, and nothing they placed there is followed."""
    home = Path(entry.pw_dir)
    for notebook in notebooks:
        target = home / Path(notebook).name
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        try:
            os.write(fd, Path(notebook).read_bytes())
            os.fchown(fd, entry.pw_uid, entry.pw_gid)
        finally:
            os.close(fd)


# JupyterLab's user setting that asks about (and fetches) Jupyter news, under the home.
NEWS_SETTING = (
    ".jupyter", "lab", "user-settings", "@jupyterlab", "apputils-extension", "notification.jupyterlab-settings",
)  # fmt: skip
NEWS_OFF = '{"fetchNews": "false", "checkForUpdates": false}\n'


def news_off(entry: pwd.struct_passwd) -> bool:
    """Write JupyterLab's "no news" setting into the learner's home, unless a file of that
    name is there (their own choice stands). Every folder on the way is opened relative to
    the one above without following a link, and made (mode 0700, theirs) when missing, so
    nothing a learner placed there can make root write elsewhere. Whether it was written."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        folder = os.open(entry.pw_dir, flags)
    except OSError:
        return False
    try:
        for part in NEWS_SETTING[:-1]:
            try:
                os.mkdir(part, 0o700, dir_fd=folder)
                made = True
            except FileExistsError:
                made = False
            inner = os.open(part, flags, dir_fd=folder)
            os.close(folder)
            folder = inner
            if made:
                os.fchown(folder, entry.pw_uid, entry.pw_gid)
        try:
            fd = os.open(NEWS_SETTING[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder)
        except FileExistsError:
            return False
        try:
            os.write(fd, NEWS_OFF.encode())
            os.fchown(fd, entry.pw_uid, entry.pw_gid)
        finally:
            os.close(fd)
        return True
    except OSError:  # a link or a file where a folder belongs: the learner's doing, left alone
        return False
    finally:
        os.close(folder)


def fresh_runtime(root: str | Path, entry: pwd.struct_passwd) -> Path:
    """The learner's runtime folder, ``<root>/<uid>``, made anew (mode 0700, theirs; ``root``
    itself root's, 0755, so nobody else can place anything there): whatever a previous
    server of theirs, or an earlier user with the same uid, left there is gone. Their
    kernels' sockets and their private servers live in it, on paths short enough for a unix
    socket whatever their home's length."""
    base = Path(root)
    base.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = base.lstat()
    if base.is_symlink() or info.st_uid != 0:
        raise RuntimeError(f"{base} must be a folder of root's that only root can write (mode 0755); it is not")
    base.chmod(0o755)  # whatever the hub's umask (077): every learner passes through to their own
    folder = base / str(entry.pw_uid)
    remove_runtime(folder)
    os.mkdir(folder, 0o700)
    os.chown(folder, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    folder.chmod(0o700)
    return folder


def remove_runtime(folder: Path) -> None:
    """Remove a learner's runtime folder, following no link inside it (nor it, if one)."""
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.exists():
        shutil.rmtree(folder)  # fd-based on Linux: a link inside is removed, never followed


def cap(memory_bytes: int | None, tasks: int, nice: int) -> None:
    """Cap the calling process and all it starts, before it gives root up: ``RLIMIT_DATA``
    (every process's writable memory, ``memory_bytes``; None: none), ``RLIMIT_NPROC`` (the
    processes and threads of its real user at once: all of one learner's, wherever they
    run) and a niceness (a learner's busy loop yields to the hub and the class server)."""
    import resource

    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
    os.setpriority(os.PRIO_PROCESS, 0, nice)


class ClassSpawner(LocalProcessSpawner):
    """Each learner's server as their own Unix user (made on their first start)."""

    user_prefix = Unicode("jupyter-", help="Unix users are <prefix><learner id>").tag(config=True)
    homes = Unicode("/home", help="where the learners' homes are made").tag(config=True)
    lessons = List(Unicode(), help="notebooks copied into each home before a start").tag(config=True)
    # mem_limit (JupyterHub's own setting, which LocalProcessSpawner does not enforce) is
    # each of the learner's processes' cap here: RLIMIT_DATA, set below.
    tasks_limit = Integer(256, help="processes and threads a learner's Unix user may run at once").tag(config=True)
    nice = Integer(10, help="niceness of a learner's processes (0-19)").tag(config=True)
    runtime_root = Unicode("/run/echoq", help="each learner's runtime folder is <this>/<uid>").tag(config=True)

    @property
    def unix_name(self) -> str:
        return system_user(self.user.name, self.user_prefix)

    def make_preexec_fn(self, name: str):  # noqa: ANN201 (JupyterHub's signature)
        become = set_user_setuid(self.unix_name)
        memory, tasks, nice = self.mem_limit, self.tasks_limit, self.nice

        def preexec() -> None:  # in the child, between fork and exec: caps first, as root
            cap(memory, tasks, nice)
            become()

        return preexec

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        entry = pwd.getpwnam(self.unix_name)
        env["USER"] = entry.pw_name
        env["HOME"] = entry.pw_dir
        env["SHELL"] = "/bin/sh"
        runtime = Path(self.runtime_root) / str(entry.pw_uid)
        env["XDG_RUNTIME_DIR"] = str(runtime)  # the kit's private servers (echoq.server.private_home)
        env["JUPYTER_RUNTIME_DIR"] = str(runtime / "jupyter")  # kernels' connection files and sockets
        return env

    async def start(self):  # noqa: ANN201
        entry = ensure_user(self.unix_name, self.homes)
        refuse_unsafe(entry)
        copy_lessons(list(self.lessons), entry)
        news_off(entry)
        fresh_runtime(self.runtime_root, entry)
        return await super().start()

    async def stop(self, now: bool = False) -> None:
        await super().stop(now=now)
        try:  # nothing of theirs outlives their server there
            remove_runtime(Path(self.runtime_root) / str(pwd.getpwnam(self.unix_name).pw_uid))
        except (KeyError, OSError) as exc:  # their user removed meanwhile, or a folder we cannot remove
            self.log.warning("could not remove %s's runtime folder: %s", self.unix_name, exc)
