"""Where the kit is launched: Binder (repo2docker), conda, and Valkey in a Docker container.

No network and no Docker engine here, so Binder is proven offline: repo2docker reads the
repository and writes the Dockerfile it would build (``--no-build``), and the tests read that.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"


def _tool(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


binder_link = _tool("binder_link")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# conda-forge names the same distributions differently from PyPI.
CONDA_TO_PYPI = {"redis-py": "redis", "matplotlib-base": "matplotlib"}
# Conda-only lines that are not Python distributions of the project.
CONDA_TOOLING = {"python", "pip"}


# ---------------------------------------------------------------- Binder (repo2docker)


@pytest.fixture(scope="module")
def dockerfile() -> str:
    """The Dockerfile repo2docker would build from this checkout, and its log, without building."""
    result = subprocess.run(
        [sys.executable, "-m", "repo2docker", "--no-build", "--no-run", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stderr + result.stdout


def test_repo2docker_picks_the_binder_conda_environment_on_python_311(dockerfile: str) -> None:
    assert "Building conda environment for python=3.11" in dockerfile
    assert '--file "binder/environment.yml"' in dockerfile
    # The root environment.yml is ignored when binder/ exists: only the binder one is copied in.
    assert "src/environment.yml" not in dockerfile
    # One environment for server and kernel, so JupyterLab sees ipympl's front-end extension.
    assert "ENV KERNEL_PYTHON_PREFIX=${NB_PYTHON_PREFIX}" in dockerfile


def test_repo2docker_runs_postbuild_and_uses_the_start_script(dockerfile: str) -> None:
    assert "RUN ./binder/postBuild" in dockerfile
    assert 'ENV R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile


def test_postbuild_fails_loudly_and_installs_the_kit() -> None:
    text = (BINDER / "postBuild").read_text()
    assert os.access(BINDER / "postBuild", os.X_OK)
    # repo2docker ignores a failing postBuild unless it sets -e.
    assert re.search(r"^set -e", text, re.M), "postBuild must start with set -e"
    assert re.search(r"^python -m pip install .*-e \.$", text, re.M)


@pytest.mark.server
def test_start_script_hands_over_to_the_given_command_in_the_same_process() -> None:
    start = BINDER / "start"
    assert os.access(start, os.X_OK)
    assert start.read_text().rstrip().splitlines()[-1] == 'exec "$@"'
    env = {k: v for k, v in os.environ.items() if k not in ("ECHOQ_VALKEY", "VALKEY_URL")}
    # `exec` replaces the shell: the command reports the very pid we started.
    proc = subprocess.Popen(
        [str(start), "sh", "-c", 'echo "$$ $ECHOQ_VALKEY $0"', "passed-through"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out.split() == [str(proc.pid), "embedded", "passed-through"]


@pytest.mark.server
def test_start_script_leaves_a_chosen_server_alone() -> None:
    env = {**os.environ, "ECHOQ_VALKEY": "docker"}
    out = subprocess.run(
        [str(BINDER / "start"), "sh", "-c", "echo $ECHOQ_VALKEY"], capture_output=True, text=True, env=env, timeout=30
    )
    assert out.stdout.strip() == "docker"


def test_readme_opens_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    title, _, rest = readme.partition("\n")
    assert title.startswith("# "), "the README opens with its title"
    block = rest.strip().split("```")
    assert block[0] == "" and block[1].startswith("bash\n"), "the README must open with a bash block"
    commands = [line.split("#")[0].strip() for line in block[1].splitlines()[1:] if line.strip()]
    assert commands == ["make lab", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.server
def test_readme_binder_badge_opens_the_first_lesson_in_jupyterlab() -> None:
    """The badge is this repository's own (derived from its git remote by tools/binder_link.py),
    or, while the checkout has no public address, the one line saying how to make it: never a
    placeholder that launches nothing."""
    readme = (ROOT / "README.md").read_text()
    opening = readme.split("\n## ")[0]  # the badge sits in the opening, next to the two commands
    assert "OWNER" not in readme, "a placeholder Binder link launches nothing"
    start, end = opening.index(binder_link.BADGE_START), opening.index(binder_link.BADGE_END)
    match = re.search(
        r"https://mybinder\.org/v2/(gh|gl|git)/(\S+?)/HEAD\?urlpath=lab/tree/(\S+?\.ipynb)\)", opening[start:end]
    )
    remote = binder_link.origin()
    if match is None:
        assert "make binder-link" in opening and "make binder-badge" in opening
        return
    target = match.group(3)
    assert target.startswith("notebooks/00_") and (ROOT / target).is_file(), target
    if remote:  # the badge must be this repository's
        assert binder_link.binder_url(remote) in opening


@pytest.mark.parametrize(
    ("remote", "link"),
    [
        ("https://github.com/ada/echoq.git", "https://mybinder.org/v2/gh/ada/echoq/HEAD"),
        ("git@github.com:ada/echoq.git", "https://mybinder.org/v2/gh/ada/echoq/HEAD"),
        ("ssh://git@github.com/ada/echoq", "https://mybinder.org/v2/gh/ada/echoq/HEAD"),
        ("https://gitlab.com/ada/teach/echoq.git", "https://mybinder.org/v2/gl/ada%2Fteach%2Fechoq/HEAD"),
        (
            "https://git.example.org/echoq.git",
            "https://mybinder.org/v2/git/https%3A%2F%2Fgit.example.org%2Fechoq.git/HEAD",
        ),
    ],
)
def test_binder_link_is_derived_from_the_git_remote(remote: str, link: str, tmp_path: Path) -> None:
    url = binder_link.binder_url(remote)
    assert url == f"{link}?urlpath=lab/tree/notebooks/00_start_here.ipynb"
    readme = tmp_path / "README.md"
    readme.write_text(f"# echoq\n{binder_link.BADGE_START}run make binder-badge{binder_link.BADGE_END}\n")
    binder_link.write_readme(readme, url)
    assert f"[![Launch on Binder](https://mybinder.org/badge_logo.svg)]({url})" in readme.read_text()


@pytest.mark.server
def test_binder_link_without_a_remote_says_so_in_one_line(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "binder_link.py")], cwd=tmp_path, capture_output=True, text=True
    )
    assert binder_link.origin(tmp_path) is None
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "no git remote 'origin'" in result.stderr


# ---------------------------------------------------------------- no drift between the lists


def _bounds(spec: SpecifierSet) -> str:
    """Every bound a requirement states, in one order ('' if none)."""
    return ",".join(sorted(str(s) for s in spec))


def _pyproject_runtime_and_lab() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["teaching"]]
    return {canonicalize_name(r.name): _bounds(r.specifier) for r in reqs}


def _conda_env(path: Path) -> tuple[dict[str, str], list[str]]:
    """(distribution -> its bounds, in PyPI names, local pip lines) of an environment.yml."""
    env = yaml.safe_load(path.read_text())
    assert env["channels"][0] == "conda-forge", f"{path.name}: conda-forge first"
    names: dict[str, str] = {}
    local: list[str] = []
    python = None
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for line in dep["pip"]:
                if line.startswith(("-e", ".")):
                    local.append(line)
                else:
                    req = Requirement(line)
                    names[canonicalize_name(req.name)] = _bounds(req.specifier)
            continue
        # "name", "name=version" (a pin) or "name>=a,<b" (bounds, as in pyproject.toml)
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(?:=([\w.]+)|([<>!=][<>=\w.,]*))?", dep)
        assert match, f"{path.name}: cannot read the conda spec {dep!r}"
        name, pinned, bounds = match.groups()
        if name == "python":
            python = pinned
        if name in CONDA_TOOLING:
            continue
        assert pinned is None, f"{path.name}: {dep!r} pins a version pyproject.toml only bounds"
        names[canonicalize_name(CONDA_TO_PYPI.get(name, name))] = _bounds(SpecifierSet(bounds or ""))
    assert python == "3.11", f"{path.name}: pin python=3.11 (the kit's floor, and what CI runs)"
    return names, local


def test_environment_files_name_the_same_packages_as_pyproject() -> None:
    wanted = _pyproject_runtime_and_lab()
    for path in (ROOT / "environment.yml", BINDER / "environment.yml"):
        names, _ = _conda_env(path)
        assert set(names) == set(wanted), (
            f"{path.relative_to(ROOT)} drifted from pyproject.toml: "
            f"missing {sorted(set(wanted) - set(names))}, extra {sorted(set(names) - set(wanted))}"
        )
        assert names == wanted, f"{path.relative_to(ROOT)}: bounds differ from pyproject.toml"


def test_binder_environment_is_the_root_one_without_the_local_install() -> None:
    root_names, root_local = _conda_env(ROOT / "environment.yml")
    binder_names, binder_local = _conda_env(BINDER / "environment.yml")
    assert root_names == binder_names
    # conda runs pip from the file's folder, so `-e .` is this checkout; Binder installs it in postBuild.
    assert root_local == ["-e ."]
    assert binder_local == [], "a local pip line in binder/ would be resolved against binder/, not the root"


# ---------------------------------------------------------------- Valkey in a Docker container


def _docker_engine() -> str | None:
    """None when an engine answers, else why not (for the skip reason)."""
    try:
        import docker  # type: ignore

        docker.from_env().ping()
        return None
    except Exception as exc:  # no socket, no permission, daemon down: all mean "no engine"
        return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__


def _without_server_choice() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "ECHOQ_VALKEY")}


def _run_notebook(cells: list[str], env: dict[str, str], tmp_path: Path) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    old = os.environ.copy()
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits the environment of the process that starts it
    try:
        NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return nb


@pytest.mark.server
def test_a_notebook_without_docker_shows_the_one_line_reason(tmp_path: Path) -> None:
    if _docker_engine() is None:
        pytest.skip("a Docker engine is reachable here; the no-engine message cannot be shown")
    env = {**_without_server_choice(), "ECHOQ_VALKEY": "docker"}
    with pytest.raises(CellExecutionError) as info:
        _run_notebook(["import echoq", "echoq.connect()"], env, tmp_path)
    assert info.value.ename == "DockerUnavailable"
    assert "\n" not in info.value.evalue
    assert "no Docker engine answered" in info.value.evalue and "VALKEY_URL" in info.value.evalue


@pytest.mark.server
@pytest.mark.slow
def test_suite_and_notebooks_run_against_a_valkey_container(tmp_path: Path) -> None:
    """`ECHOQ_VALKEY=docker make test`, in small: the queue tests and a notebook on a container."""
    reason = _docker_engine()
    if reason is not None:
        pytest.skip(f"no Docker engine reachable ({reason}); ECHOQ_VALKEY=docker runs where one is")
    env = {**_without_server_choice(), "ECHOQ_VALKEY": "docker"}
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests/test_queue.py", "-k", "valkey"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert suite.returncode == 0, suite.stdout[-3000:]
    assert " passed" in suite.stdout
    nb = _run_notebook(
        [
            "import echoq",
            "q = echoq.Queue('from-a-container'); q.reset(); q.enqueue('x')",
            "print(echoq.describe(q.client))",
        ],
        env,
        tmp_path,
    )
    said = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "a Docker container started by testcontainers" in said, said


@pytest.mark.server
def test_make_lab_serves_the_first_lesson_on_loopback_only() -> None:
    """The README's first command, as written: JupyterLab on 127.0.0.1 opening lesson 00."""
    import signal
    import socket
    import time
    import urllib.error

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PORT": str(port), "JUPYTER_PLATFORM_DIRS": "1"}
    lab = subprocess.Popen(
        ["make", "--no-print-directory", "lab"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        location = None
        give_up = time.monotonic() + 60
        while location is None and time.monotonic() < give_up and lab.poll() is None:
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/")
                opener = urllib.request.build_opener(NoRedirect())
                opener.open(request, timeout=2)
            except urllib.error.HTTPError as reply:  # the 302 we want
                location = reply.headers.get("Location")
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        assert location is not None, "make lab did not answer within 60 s"
        assert location.split("?")[0].endswith("/lab/tree/00_start_here.ipynb"), location
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        if listening.strip():  # ss is there: nothing but loopback may listen on the port
            assert all("127.0.0.1:" in line for line in listening.splitlines()), listening
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None
