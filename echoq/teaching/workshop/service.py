"""The instructor dashboard's process under JupyterHub: ``jupyterhub.singleuser``, whose
SIGINT is a clean stop.

JupyterHub stops a service it manages with SIGINT, and only after 30 s with SIGTERM (a
service's spawner takes none of the hub's timeouts). Started without a terminal, a Jupyter
server gets SIGINT as a KeyboardInterrupt wherever its main thread is at that moment, and
code there that catches it (a kernel client, a callback) swallows it: the hub then waited
the full 30 s at an instructor's Ctrl-C. Here SIGINT is passed on as SIGTERM, on which the
server stops at once and cleanly. Run as ``python -m echoq.teaching.workshop.service`` with
``jupyterhub.singleuser``'s arguments.
"""

from __future__ import annotations

import os
import signal


def _stop(_signum: int, _frame: object) -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    # The Jupyter server installs its own SIGTERM handler and, without a terminal, leaves
    # SIGINT as it finds it: this one.
    signal.signal(signal.SIGINT, _stop)
    from jupyterhub.singleuser import main as singleuser

    singleuser()


if __name__ == "__main__":
    main()
