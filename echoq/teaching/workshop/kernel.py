"""A learner's kernel on the class hub: ipykernel with no TCP port at all.

The hub gives each learner's server ``KernelManager.transport = "ipc"`` (see
:data:`CONFIG_DIR`): the kernel's five sockets are unix sockets beside its connection file,
in the learner's Jupyter runtime folder (mode 0700), so no other user can connect to them
or subscribe to what their kernel prints. Two sockets ipykernel opens on its own would still
be TCP ports on 127.0.0.1, which any local user can connect to:

* the pipe that carries the output of processes the kernel forks (a PULL socket on a random
  port): here a unix socket beside the others;
* debugpy's port, opened when the debugger starts: here the debugger is off (the class's
  lessons do not use it; the kernel says so in its ``kernel_info``, and JupyterLab hides
  the debugger's button).

An allocation over the memory cap the hub's spawner set (``RLIMIT_DATA``) is refused: the
cell fails with one line saying so (:func:`echoq.teaching.learner.over_the_cap_line`), and
the kernel lives on.

Run as ``python -m echoq.teaching.workshop.kernel -f <connection file>``, as the kernel
spec in :data:`DATA_DIR` does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["CONFIG_DIR", "DATA_DIR", "pipe_address", "main"]

HERE = Path(__file__).resolve().parent / "jupyter"
# JUPYTER_CONFIG_PATH for a learner's server: jupyter_server_config.json, the ipc transport.
CONFIG_DIR = HERE / "config"
# JUPYTER_PATH for a learner's server: kernels/python3, this module as the kernel.
DATA_DIR = HERE / "data"


def pipe_address(argv: list[str]) -> str:
    """The fork pipe's address: a unix socket beside the connection file named by ``-f``."""
    given = next((a.split("=", 1)[1] for a in argv if a.startswith("-f=")), None)
    if given is None and "-f" in argv[:-1]:
        given = argv[argv.index("-f") + 1]
    if not given:
        raise SystemExit("echoq.teaching.workshop.kernel: run it with -f <connection file>, as Jupyter does")
    return f"ipc://{os.path.splitext(os.path.abspath(given))[0]}-ipc-pipe"


def main() -> None:
    import zmq
    from ipykernel import debugger, iostream, kernelapp
    from zmq.eventloop.zmqstream import ZMQStream

    from ..learner import over_the_cap_line  # imported now: at a MemoryError there may be no room

    address = pipe_address(sys.argv[1:])

    class UnixPipeIOPubThread(iostream.IOPubThread):
        """ipykernel's IOPub thread, its fork pipe on a unix socket (the same protocol: a
        random key first in each message, checked by ``_handle_pipe_msg``)."""

        def _setup_pipe_in(self) -> None:
            self._pipe_uuid = os.urandom(16)
            pipe_in = self.socket.context.socket(zmq.PULL)
            pipe_in.linger = 0
            pipe_in.bind(address)
            self._pipe_in = ZMQStream(pipe_in, self.io_loop)
            self._pipe_in.on_recv(self._handle_pipe_msg)

        def _setup_pipe_out(self):  # noqa: ANN202 (ipykernel's)
            ctx = zmq.Context()
            pipe_out = ctx.socket(zmq.PUSH)
            pipe_out.linger = 3000
            pipe_out.connect(address)
            return ctx, pipe_out

    kernelapp.IOPubThread = UnixPipeIOPubThread  # what IPKernelApp.init_iopub builds
    debugger._is_debugpy_available = False  # read at each use: no debugpy, no port of its own
    app = kernelapp.IPKernelApp.instance()
    app.initialize()
    if app.shell is not None:

        def over_the_cap(shell, etype, value, tb, tb_offset=None):  # noqa: ANN001, ANN202 (IPython's signature)
            line = over_the_cap_line()
            shown = [f"\x1b[0;31mMemoryError\x1b[0m: {line}"]
            shell._showtraceback(etype, line, shown)  # an error output of one line
            return shown

        app.shell.set_custom_exc((MemoryError,), over_the_cap)
    app.start()


if __name__ == "__main__":
    main()
