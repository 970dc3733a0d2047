"""``python -m echoq.teaching workshop hub``: JupyterHub for the class on this one machine, offline.

What it runs, all on the machine and nothing fetched from the internet:

* JupyterHub from the project's own extras (``pip install 'echoq[teaching,test]'`` or
  ``make setup`` installs it), with configurable-http-proxy from npm, installed once into
  ``build/hub`` by ``tools/hub-deps.sh`` (or any ``configurable-http-proxy`` on ``PATH``);
* ``SharedPasswordAuthenticator``: learners on the roster log in with the class password,
  instructors (``workshop up --instructor``) with their own; nobody else gets in;
* :class:`~.spawner.ClassSpawner`: one Jupyter server per learner, run as that learner's
  own Unix user (``jupyter-<learner>``, made with ``useradd`` as The Littlest JupyterHub
  does), in a home of mode 0700 (``/home/jupyter-<learner>``; ``--homes``); before each
  server starts the lessons are copied there (``notebooks/*.ipynb``; a notebook the learner
  already has is never overwritten). No Terminal unless ``--terminals``. The hub must run
  as root (only root can start a process as another user) and refuses otherwise, in one
  line; the learners' Python (``--learner-python``) must be one every user can run;
  their kernels listen on unix sockets in their own runtime folder (``/run/echoq/<uid>``,
  mode 0700), never on TCP (:mod:`.kernel`); each learner is capped (``--memory`` per
  process, ``--tasks`` processes and threads, niceness 10: :func:`.spawner.cap`);
* the workshop's own snippet (their ``VALKEY_URL``, the dashboard service).

Files (in ``<workshop>/hub``, mode 0700, each file 0600 and root's): ``jupyterhub_config.py``,
the hub's database and cookie secret, ``class-password`` and ``instructor-password``. The
learners' homes are elsewhere (``--homes``), each its learner's alone. The hub runs in the
foreground; Ctrl-C stops it and with it every learner's server (their notebooks stay in
their homes). ``workshop down`` leaves the
learners' Unix users and homes where they are: ``userdel -r <user>`` each when they are no
longer needed.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ...errors import InvalidArgument
from .admin import FREE_PORT_SOURCE, HUB_SNIPPET, Workshop, command, write_private
from .kernel import CONFIG_DIR, DATA_DIR

__all__ = ["HUB_DIR", "HubOptions", "find_proxy", "lesson_notebooks", "prepare", "config_text"]

HUB_DIR = "hub"
DATABASE = "jupyterhub.sqlite"
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


@dataclass(frozen=True)
class HubOptions:
    """How the class hub runs its learners (``workshop hub``'s options)."""

    ip: str = "127.0.0.1"
    port: int = 8000
    homes: str = "/home"  # where each learner's home (mode 0700) is made
    user_prefix: str = "jupyter-"  # Unix users are <prefix><learner id>, as TLJH names them
    learner_python: str = sys.executable  # the Python learners' servers and kernels run
    terminals: bool = False  # a Terminal for learners only when the instructor asks
    memory: str = "2G"  # each learner's process's cap (RLIMIT_DATA): K, M, G or T bytes
    tasks: int = 256  # processes and threads one learner's Unix user may run at once (RLIMIT_NPROC)
    nice: int = 10  # their niceness: a learner's busy loop yields to the hub and the class server


MEMORY_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
MIN_MEMORY = 512 * 2**20  # below this a learner's JupyterLab or kernel cannot start
MIN_TASKS = 64  # a learner's server and a few kernels (about 15 threads each)


def memory_bytes(size: str) -> int:
    """``2G``, ``512M``, ``1073741824``: bytes; a one-line error for anything else, or too little."""
    found = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)B?\s*", size.upper())
    if not found:
        raise InvalidArgument(f"--memory {size!r}: give a size such as 2G or 512M (K, M, G, T: powers of 1024)")
    value = int(found[1]) * MEMORY_UNITS.get(found[2], 1)
    if value < MIN_MEMORY:
        raise InvalidArgument(f"--memory {size}: a learner's JupyterLab needs at least 512M; give 512M or more")
    return value


def config_text(workshop: Workshop, folder: Path, options: HubOptions, *, proxy: Path) -> str:
    """The hub's jupyterhub_config.py (no password in it: they are read from 0600 files)."""
    users = sorted(ln.hub_user for ln in workshop.learners.values())
    notebooks = [str(p) for p in lesson_notebooks()]
    terminals = [] if options.terminals else ["--ServerApp.terminals_enabled=False"]
    return f"""# JupyterHub for echoq workshop {workshop.class_name!r},
# written by `python -m echoq.teaching workshop hub`.
{FREE_PORT_SOURCE}

c = get_config()  # noqa: F821
load_subconfig({str(workshop.dir / HUB_SNIPPET)!r})  # noqa: F821  (VALKEY_URL per learner, the dashboard)

c.JupyterHub.ip = {options.ip!r}
c.JupyterHub.port = {options.port}
c.JupyterHub.hub_ip = "127.0.0.1"
# The hub's own API and the proxy's API on loopback ports free at start, not JupyterHub's
# fixed 8081 and 8001: another hub or program on this machine may hold those. Each learner's
# server gets its port the same way when it starts (below), not JupyterHub's pick from the
# range outgoing connections take theirs from.
c.JupyterHub.hub_port = _echoq_free_port()
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{{_echoq_free_port()}}"
c.ConfigurableHTTPProxy.command = [{str(proxy)!r}]
c.ConfigurableHTTPProxy.pid_file = {str(folder / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{folder / DATABASE}"
c.JupyterHub.cookie_secret_file = {str(folder / "cookie_secret")!r}

c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = open({str(folder / "class-password")!r}).read().strip()
c.SharedPasswordAuthenticator.admin_password = open({str(folder / "instructor-password")!r}).read().strip()
c.Authenticator.allowed_users = set({users!r})
c.Authenticator.admin_users = set({sorted(workshop.instructors)!r})

# One learner, one Unix user (echoq/teaching/workshop/spawner.py): never the hub's own.
c.JupyterHub.spawner_class = "echoq.teaching.workshop.spawner.ClassSpawner"
c.ClassSpawner.user_prefix = {options.user_prefix!r}
c.ClassSpawner.homes = {options.homes!r}
c.ClassSpawner.lessons = {notebooks!r}
# Each learner capped (spawner.cap): every process's memory, their processes and threads at
# once, their niceness. Over the memory cap an allocation is refused in that kernel alone.
c.Spawner.mem_limit = {memory_bytes(options.memory)}
# Kernels on unix sockets in the learner's runtime folder (0700), none on TCP
# (echoq/teaching/workshop/kernel.py): no other user can connect to them or subscribe.
c.Spawner.environment.update({{"JUPYTER_CONFIG_PATH": {str(CONFIG_DIR)!r}, "JUPYTER_PATH": {str(DATA_DIR)!r}}})
c.ClassSpawner.tasks_limit = {options.tasks}
c.ClassSpawner.nice = {options.nice}
c.Spawner.cmd = [{options.learner_python!r}, "-m", "jupyterhub.singleuser"]
# Offline: no news or update fetches; the app object exposed lets a script drive JupyterLab
# (the tests). No Terminal unless the instructor asked for one (`workshop hub --terminals`).
c.Spawner.args = {[*LAB_ARGS, *terminals]!r}
c.Spawner.default_url = "/lab"
# A stopped server ends at once (the defaults wait 10 s + 5 s per server at hub shutdown).
c.Spawner.interrupt_timeout = 3
c.Spawner.term_timeout = 3


def _before_spawn(spawner):
    spawner.port = _echoq_free_port()


c.Spawner.pre_spawn_hook = _before_spawn
"""


def check_root() -> None:
    """Only root can start a process as another user: refuse, in one line, anyone else."""
    if os.geteuid() != 0:
        raise InvalidArgument(
            "the class hub starts each learner's server as that learner's own Unix user, which only root can do: "
            f"run `sudo {command('hub')} ...` (or use The Littlest JupyterHub, "
            "docs/WORKSHOP.md); it never runs learners as your own user"
        )


# What a learner's server needs, found (not imported: a fraction of a second) as the learner.
LEARNER_PYTHON_CHECK = (
    "import echoq.teaching, importlib.util as u; "
    "missing = [m for m in ('jupyterhub.singleuser', 'ipykernel', 'jupyterlab') if u.find_spec(m) is None]; "
    "assert not missing, f'ModuleNotFoundError: {missing}'"
)


def check_learner_python(python: str, entry) -> None:  # noqa: ANN001 (a pwd entry)
    """The learners' Python must run for a learner (a Python under /root, mode 0700, does
    not): tried as that learner, before any server is started."""
    try:
        done = subprocess.run(
            [python, "-c", LEARNER_PYTHON_CHECK],
            user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd=entry.pw_dir,
            env={"PATH": "/usr/bin:/bin", "HOME": entry.pw_dir}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        failed = done.returncode != 0 and (done.stderr.strip().splitlines() or ["?"])[-1]
    except OSError as exc:
        failed = f"{type(exc).__name__}: {exc.strerror}"
    if failed:
        raise InvalidArgument(
            f"learners cannot run the kit with {python} as Unix user {entry.pw_name!r} ({failed}): "
            "run `make shared-env` (a copy of this checkout and a venv over a Python every user can "
            "run, in /opt/echoq; SHARED_ENV=DIR for another folder), after which `make hub` uses it; "
            "or name such a Python: `make hub LEARNER_PYTHON=PATH` (--learner-python PATH)"
        )


def prepare(folder: str | Path | None = None, options: HubOptions | None = None) -> tuple[Path, list[str]]:
    """Write the hub's folder and config for the workshop in ``folder`` and make each
    roster learner's Unix user; the config's path and the login details to print once the
    hub is up (the class password, which goes on the board; never the instructor's)."""
    from .spawner import ensure_user, refuse_unsafe, system_user

    options = options or HubOptions()
    if not 1 <= options.port <= 65535:
        raise InvalidArgument(f"--port must be a TCP port from 1 to 65535, got {options.port}")
    memory_bytes(options.memory)
    if options.tasks < MIN_TASKS:
        raise InvalidArgument(f"--tasks {options.tasks}: a learner's server and kernels need at least {MIN_TASKS}")
    check_root()
    workshop = Workshop.load(folder)
    proxy = find_proxy()
    if not workshop.instructors:
        raise InvalidArgument(
            "no instructor for the hub's dashboard: run `workshop up --instructor NAME` (your hub user name) first"
        )
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,15}", options.user_prefix):
        raise InvalidArgument(
            f"--user-prefix {options.user_prefix!r}: use up to 16 of a-z, 0-9, '_' and '-', starting with a letter"
        )
    if not Path(options.homes).is_dir():
        raise InvalidArgument(f"--homes {options.homes}: no such folder (the learners' homes are made in it)")
    try:
        entries = [ensure_user(system_user(ln.hub_user, options.user_prefix), options.homes)
                   for ln in sorted(workshop.learners.values(), key=lambda ln: ln.id)]  # fmt: skip
        for entry in entries:
            refuse_unsafe(entry)
    except RuntimeError as exc:  # an account not ours, or one that would be root: one line, no hub
        raise InvalidArgument(str(exc)) from None
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or b"").decode(errors="replace").strip().splitlines() or [f"exit status {exc.returncode}"]
        raise InvalidArgument(f"useradd could not make a learner's Unix user: {said[-1]}") from None
    check_learner_python(options.learner_python, entries[0])
    where = workshop.dir / HUB_DIR
    where.mkdir(mode=0o700, exist_ok=True)
    where.chmod(0o700)
    class_password = _password(where / "class-password", 12)
    _password(where / "instructor-password", 32)
    if not (where / "cookie_secret").is_file() or not (where / "cookie_secret").read_text().strip():
        write_private(where / "cookie_secret", secrets.token_hex(32) + "\n")
    database = where / DATABASE  # the hub writes into it: 0600 from its first byte (SQLite takes an empty file)
    os.close(os.open(database, os.O_WRONLY | os.O_CREAT, 0o600))
    database.chmod(0o600)
    config = where / "jupyterhub_config.py"
    write_private(config, config_text(workshop, where, options, proxy=proxy))
    users = [ln.display for _lid, ln in sorted(workshop.learners.items())]  # one order everywhere: the id
    shown = ", ".join(users[:6]) + (f", ... ({len(users)} in all)" if len(users) > 6 else "")
    url = f"http://{options.ip}:{options.port}/"
    lines = [
        f"each learner's server runs as their own Unix user ({entries[0].pw_name}, ...), in a home of mode 0700 "
        f"in {options.homes}, with the lessons copied there; "
        + ("a Terminal allowed (--terminals)" if options.terminals else "no Terminal"),
        f"each learner capped: {options.memory} of memory per process, {options.tasks} processes and threads, "
        f"nice {options.nice}; their kernels on unix sockets in their own 0700 folder, none on TCP",
        f"JupyterHub for class {workshop.class_name!r} is up at {url} (Ctrl-C stops it, and every learner's server)",
        f"  learners ({shown}) log in with their roster name and the class password: {class_password}",
        f"  instructors ({', '.join(workshop.instructors)}) log in with the password in "
        f"{where / 'instructor-password'} (mode 0600), and land on the dashboard: {url}services/echoq-dashboard/",
    ]
    return config, lines


LOG_FILE = "hub.log"


def run(config: Path, lines: list[str], options: HubOptions) -> int:
    """Run the hub of ``config`` until it stops, its log going to ``hub.log`` beside it (mode
    0600); print the login details ``lines`` last, once the hub answers, so no log line
    scrolls them away. Ctrl-C (or SIGTERM) stops it: the hub is told, and waited for."""
    import signal
    import time
    import urllib.request

    log = config.parent / LOG_FILE
    print(f"starting JupyterHub; its log: {log}", flush=True)
    # Private bytecode caches in the checkout (umask 077) would be folders learners cannot
    # read: the hub and its dashboard write none.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    before = os.umask(0o077)  # the hub's database, pid and log files, and all it starts: private
    try:
        with open(log, "ab") as out:
            hub = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(config)],
                cwd=config.parent, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,  # only this process tells it to stop: one signal, not two
            )  # fmt: skip
    finally:
        os.umask(before)

    def stop(_signum: int, _frame: object) -> None:
        if hub.poll() is None:
            hub.send_signal(signal.SIGTERM)

    for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(each, stop)
    probe = f"http://{'127.0.0.1' if options.ip in ('0.0.0.0', '') else options.ip}:{options.port}/hub/api"
    while hub.poll() is None:
        try:
            with urllib.request.urlopen(probe, timeout=2) as reply:  # noqa: S310 (the hub just started)
                if reply.status == 200:
                    break
        except OSError:
            pass
        time.sleep(0.2)
    if hub.poll() is not None:
        tail = log.read_bytes().decode(errors="replace").splitlines()[-15:]
        print(f"echoq: JupyterHub stopped before it answered (exit status {hub.returncode}); the end of {log}:",
              *tail, sep="\n", file=sys.stderr)  # fmt: skip
        return 1
    print("\n".join(lines), flush=True)
    return 0 if hub.wait() <= 0 else hub.returncode  # stopped by a signal: as asked
