"""Servers for the tests: names that never collide, the Redis 7 binary, CI detection."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_names = itertools.count()


def fresh_name(prefix: str = "t") -> str:
    """A queue name no other test (nor another xdist worker) uses."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


def redis7_binary() -> Path | None:
    """Debian's redis-server, where installed."""
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    return Path(found) if found else None
