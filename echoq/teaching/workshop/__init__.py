"""Workshop mode: one shared Valkey for a class, each learner fenced off, a view for the instructor.

* :mod:`.admin` -- ``python -m echoq.teaching workshop up|status|down``: the shared server, one ACL
  user per learner, the roster and the JupyterHub config snippet (mode 0600);
* :mod:`.acl` -- what a learner's user and the instructor's user may touch;
* :mod:`.classroom` -- class chaos: the shared class queue, a learner's worker, the
  instructor's produce and kill, the scoreboard;
* :mod:`.board` -- the dashboard's data, read from the server, and its HTML;
* :mod:`.html` -- the one way the workshop's pages build HTML: every value escaped;
* :mod:`.watch` -- the class's watchdog (``workshop watch``): a script holding the server,
  too many connections, a huge Lua heap, a server that died -- noticed and undone;
* :mod:`.views` -- the widgets: the instructor's :class:`~.views.Dashboard` (Voila,
  ``make dashboard``) and the learner's one-cell :func:`~.views.class_worker`.

A learner's notebook needs only::

    from echoq.teaching import workshop
    workshop.class_worker()
"""

from __future__ import annotations

from typing import Any

from .admin import Learner, Workshop, down, status, up, workshop_dir
from .classroom import ClassWorker, Scoreboard, kill, new_round, produce, read_scoreboard, stop_all

__all__ = [
    "ClassWorker",
    "Dashboard",
    "Learner",
    "Scoreboard",
    "Workshop",
    "class_worker",
    "dashboard",
    "down",
    "kill",
    "new_round",
    "one_line_errors",
    "practice_alone",
    "produce",
    "read_scoreboard",
    "status",
    "stop_all",
    "up",
    "workshop_dir",
]


def __getattr__(name: str) -> Any:
    # The widgets load ipywidgets: only when a notebook asks for them, not for the CLI.
    if name in ("Dashboard", "ClassWorkerPanel", "class_worker", "dashboard", "one_line_errors", "practice_alone"):
        from . import views

        return getattr(views, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
