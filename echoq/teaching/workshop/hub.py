"""``python -m echoq.teaching workshop hub``: JupyterHub for the class on this one machine, offline.

What it runs, all on the machine and nothing fetched from the internet:

* JupyterHub from the project's own extras (``pip install 'echoq[teaching,test]'`` or
  ``make setup`` installs it), with configurable-http-proxy from npm, installed once into
  ``build/hub`` by ``tools/hub-deps.sh`` (or any ``configurable-http-proxy`` on ``PATH``);
* ``SharedPasswordAuthenticator``: learners on the roster log in with the class password,
  instructors (``workshop up --instructor``) with their own; nobody else gets in;
* ``SimpleLocalProcessSpawner``: one Jupyter server per learner, a process of this user, in
  ``<workshop>/hub/home/<user>`` (no system accounts needed); before each server starts the
  lessons are copied there (``notebooks/*.ipynb``; a notebook the learner already has is
  never overwritten);
* the workshop's own snippet (their ``VALKEY_URL``, the dashboard service).

Files (in ``<workshop>/hub``, mode 0700; passwords 0600): ``jupyterhub_config.py``, the
hub's database and cookie secret, ``class-password`` and ``instructor-password``, the
learners' homes. The hub runs in the foreground; Ctrl-C stops it and with it every
learner's server (their notebooks stay in their homes). ``workshop down`` leaves this
folder (the learners' notebooks) where it is: delete it when they are no longer needed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from pathlib import Path

from ...errors import InvalidArgument
from .admin import FREE_PORT_SOURCE, HUB_SNIPPET, Workshop, write_private

__all__ = ["HUB_DIR", "find_proxy", "lesson_notebooks", "prepare", "config_text"]

HUB_DIR = "hub"
LAB_ARGS = [
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.expose_app_in_browser=True",
]
ROOT = Path(__file__).resolve().parents[3]


def find_proxy() -> Path:
    """configurable-http-proxy: the checkout's build/hub, else PATH; a one-line error if neither."""
    local = ROOT / "build" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
    if local.is_file():
        return local
    found = shutil.which("configurable-http-proxy")
    if found:
        return Path(found)
    raise InvalidArgument(
        "configurable-http-proxy is not installed: run `bash tools/hub-deps.sh` in the checkout "
        "(it installs it from npm into build/hub), or `npm install -g configurable-http-proxy`"
    )


def lesson_notebooks() -> list[Path]:
    """The notebooks learners get: the lessons and class chaos (not the instructor's pages)."""
    folder = ROOT / "notebooks"
    return sorted(p for p in folder.glob("*.ipynb") if p.stem not in ("dashboard", "present"))


def _password(path: Path, length: int) -> str:
    if path.is_file():
        return path.read_text().strip()
    word = secrets.token_urlsafe(length)
    write_private(path, word + "\n")
    return word


def config_text(workshop: Workshop, folder: Path, *, ip: str, port: int, proxy: Path) -> str:
    """The hub's jupyterhub_config.py (no password in it: they are read from 0600 files)."""
    users = sorted(ln.hub_user for ln in workshop.learners.values())
    notebooks = [str(p) for p in lesson_notebooks()]
    root_flag = ["--allow-root"] if os.geteuid() == 0 else []
    return f"""# JupyterHub for echoq workshop {workshop.class_name!r},
# written by `python -m echoq.teaching workshop hub`.
import shutil as _shutil
from pathlib import Path as _Path

{FREE_PORT_SOURCE}

c = get_config()  # noqa: F821
load_subconfig({str(workshop.dir / HUB_SNIPPET)!r})  # noqa: F821  (VALKEY_URL per learner, the dashboard)

c.JupyterHub.ip = {ip!r}
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
# The hub's own API and the proxy's API on loopback ports free at start, not JupyterHub's
# fixed 8081 and 8001: another hub or program on this machine may hold those. Each learner's
# server gets its port the same way when it starts (below), not JupyterHub's pick from the
# range outgoing connections take theirs from.
c.JupyterHub.hub_port = _echoq_free_port()
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{{_echoq_free_port()}}"
c.ConfigurableHTTPProxy.command = [{str(proxy)!r}]
c.ConfigurableHTTPProxy.pid_file = {str(folder / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{folder / "jupyterhub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(folder / "cookie_secret")!r}

c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = _Path({str(folder / "class-password")!r}).read_text().strip()
c.SharedPasswordAuthenticator.admin_password = _Path({str(folder / "instructor-password")!r}).read_text().strip()
c.Authenticator.allowed_users = set({users!r})
c.Authenticator.admin_users = set({sorted(workshop.instructors)!r})

c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(folder / "home" / "{username}")!r}
c.Spawner.cmd = [{sys.executable!r}, "-m", "jupyterhub.singleuser"]
# Offline: no news or update fetches; the app object exposed lets a script drive JupyterLab (the tests).
c.Spawner.args = {[*root_flag, *LAB_ARGS]!r}
c.Spawner.default_url = "/lab"
# A stopped server ends at once (the defaults wait 10 s + 5 s per server at hub shutdown).
c.Spawner.interrupt_timeout = 3
c.Spawner.term_timeout = 3

_LESSONS = {notebooks!r}


def _copy_lessons(spawner):
    home = _Path(spawner.home_dir_template.format(username=spawner.user.name))
    home.mkdir(parents=True, exist_ok=True)
    for notebook in _LESSONS:
        target = home / _Path(notebook).name
        if not target.exists():  # never over a learner's own work
            _shutil.copyfile(notebook, target)


def _before_spawn(spawner):
    spawner.port = _echoq_free_port()
    _copy_lessons(spawner)


c.Spawner.pre_spawn_hook = _before_spawn
"""


def prepare(folder: str | Path | None = None, *, ip: str = "127.0.0.1", port: int = 8000) -> tuple[Path, list[str]]:
    """Write the hub's folder and config for the workshop in ``folder``; the config's path
    and the lines to print (which never contain a password)."""
    workshop = Workshop.load(folder)
    proxy = find_proxy()
    if not workshop.instructors:
        raise InvalidArgument(
            "no instructor for the hub's dashboard: run `workshop up --instructor NAME` (your hub user name) first"
        )
    where = workshop.dir / HUB_DIR
    where.mkdir(mode=0o700, exist_ok=True)
    where.chmod(0o700)
    _password(where / "class-password", 12)
    _password(where / "instructor-password", 32)
    config = where / "jupyterhub_config.py"
    write_private(config, config_text(workshop, where, ip=ip, port=port, proxy=proxy))
    users = sorted(ln.hub_user for ln in workshop.learners.values())
    shown = ", ".join(users[:6]) + (f", ... ({len(users)} in all)" if len(users) > 6 else "")
    lines = [
        f"JupyterHub for class {workshop.class_name!r} at http://{ip}:{port}/ "
        "(Ctrl-C stops it, and every learner's server)",
        f"  learners ({shown}) log in with the class password: {where / 'class-password'} (mode 0600)",
        f"  instructors ({', '.join(workshop.instructors)}) log in with: {where / 'instructor-password'} (mode 0600)",
        f"  the dashboard: http://{ip}:{port}/services/echoq-dashboard/ (instructors only)",
        f"  each learner starts with the lessons copied into {where / 'home' / '<user>'}",
    ]
    return config, lines
