"""The class hub's spawner: one learner, one Unix user, as The Littlest JupyterHub does.

JupyterHub's ``LocalProcessSpawner`` starts each server as the Unix user of the same name
(``setuid`` between fork and exec), so the hub runs as root. Here the Unix user is
``<prefix><learner id>`` (``jupyter-ada``; a name too long for Unix is cut and given a
short hash of the whole, as TLJH does), made with ``useradd`` when it is missing, with a
home of mode 0700 in ``homes`` (``/home`` by default). Nothing of the class's secrets is
in a home: the workshop folder, the hub's database, cookie secret and passwords stay the
instructor's (root's), mode 0600. A learner's server gets only what the hub gives any
server plus the workshop snippet's ``VALKEY_URL`` (their own).

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
import subprocess
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from traitlets import List, Unicode

from ..learner import from_hub_user

__all__ = ["ClassSpawner", "system_user", "ensure_user", "copy_lessons", "refuse_unsafe", "news_off"]

MAX_UNIX_NAME = 32  # useradd's limit on Linux


def system_user(hub_user: str, prefix: str = "jupyter-") -> str:
    """The Unix user a hub user's server runs as: the prefix and their learner id, cut to
    fit with a hash of the whole name when it is long (two users never share one)."""
    name = prefix + from_hub_user(hub_user)
    if len(name) <= MAX_UNIX_NAME - 6:
        return name
    return f"{name[: MAX_UNIX_NAME - 6]}-{hashlib.sha256(name.encode()).hexdigest()[:5]}"


def ensure_user(name: str, homes: str | Path) -> pwd.struct_passwd:
    """The Unix user ``name``, made (no login shell, a group of its own, a home of mode 0700
    in ``homes``) when it does not exist."""
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


class ClassSpawner(LocalProcessSpawner):
    """Each learner's server as their own Unix user (made on their first start)."""

    user_prefix = Unicode("jupyter-", help="Unix users are <prefix><learner id>").tag(config=True)
    homes = Unicode("/home", help="where the learners' homes are made").tag(config=True)
    lessons = List(Unicode(), help="notebooks copied into each home before a start").tag(config=True)

    @property
    def unix_name(self) -> str:
        return system_user(self.user.name, self.user_prefix)

    def make_preexec_fn(self, name: str):  # noqa: ANN201 (JupyterHub's signature)
        return set_user_setuid(self.unix_name)

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        entry = pwd.getpwnam(self.unix_name)
        env["USER"] = entry.pw_name
        env["HOME"] = entry.pw_dir
        env["SHELL"] = "/bin/sh"
        return env

    async def start(self):  # noqa: ANN201
        entry = ensure_user(self.unix_name, self.homes)
        refuse_unsafe(entry)
        copy_lessons(list(self.lessons), entry)
        news_off(entry)
        return await super().start()
