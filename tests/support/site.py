"""The built course site (build/site), for the tests that read it or open it in Chromium.

``make test`` builds the site strictly (``make docs``) while the tests start, holding
``build/site.lock``; a test takes the same lock before it reads the site, so it waits for that
build rather than reading half of one. A test run on its own builds the site when any of its
sources is newer than the build, so a test never reads a stale site.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "site"
SOURCES = [
    "README.md", "mkdocs.yml", "tools/site_hooks.py", "tools/binder_link.py", "tools/generated_docs.py",
    "docs", "notebooks", "echoq", "lua", "bench",  # the pages, and what the generated tables are made from
]  # fmt: skip


def site_hooks():
    """tools/site_hooks.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "tools" / "site_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _newest_source() -> float:
    newest = 0.0
    for name in SOURCES:
        path = ROOT / name
        files = (
            [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        )
        newest = max([newest, *(p.stat().st_mtime for p in files)])
    return newest


@contextlib.contextmanager
def _site_lock():
    (ROOT / "build").mkdir(exist_ok=True)
    with open(ROOT / "build" / "site.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def built_site() -> Path:
    """build/site, built (strictly, as `make docs` does) if it is missing or older than its sources."""
    with _site_lock():
        return _build_if_stale()


def _build_if_stale() -> Path:
    index = SITE / "index.html"
    if not index.exists() or index.stat().st_mtime < _newest_source():
        (ROOT / "build" / "site-src").mkdir(parents=True, exist_ok=True)
        mkdocs = Path(sys.executable).parent / "mkdocs"
        result = subprocess.run(
            [str(mkdocs), "build", "--strict"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
            timeout=600,
        )
        assert result.returncode == 0, (
            f"the strict site build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return SITE
