"""``python -m echoq worker module:function --queue NAME``: run a handler on a queue's jobs.

The handler is found as Python would import it from the current folder: ``myapp.jobs:handle``
is the function ``handle`` of the module ``myapp.jobs``, called with one
:class:`~echoq.Delivery` per job. Each ``--queue`` gets an :class:`~echoq.Worker` of its own
(``--concurrency`` handler threads each), all in this process. The worker says at start,
in one line on stderr, which server it uses (its URL without the password) and which
queues it consumes; then it logs through the ``echoq`` logger (``--log-level``, default
``info``): a handler's exception with its traceback and the JOB id at ERROR, retries and
dead letters at WARNING, start, stop and reconnects at INFO. No line holds a password or a
payload.

**Stopping.** The first SIGINT (Ctrl-C) or SIGTERM stops it cleanly: nothing more is
claimed; jobs claimed and not started go back to pending at once, their try given back;
running handlers get ``--grace-ms`` to finish and be completed; a handler still running
then has its job given back (pending again, for another worker; whatever that handler does
later is fenced off). A second signal gives back at once what still runs.

Exit status: 0 stopped cleanly (a signal) or, with ``--burst``, nothing left to do; 2
anything that went wrong -- bad options, a ``module:function`` that cannot be imported or
is not callable, an unreachable server, a refused password or ACL, any
:class:`~echoq.EchoqError` -- reported as ONE line on stderr (``echoq: ...``), never a
traceback; 130 (SIGINT) or 143 (SIGTERM): a second signal stopped it at once, 128 plus
that signal's number."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument
from ..limits import check, whole
from ..queue import DEFAULT_LEASE_MS
from .core import DEFAULT_GRACE_MS, MAX_CONCURRENCY, MAX_TIMEOUT_MS, Worker
from .delivery import WorkReport
from .signals import StopOnSignals

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
log = logging.getLogger("echoq.worker.command")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "worker",
        help="run module:function on the jobs of a queue until Ctrl-C or SIGTERM (or, with --burst, until drained)",
        description="Run a handler on the jobs of one or more queues. Ctrl-C or SIGTERM stops it cleanly "
        "(a second one at once).",
    )
    p.add_argument("handler", metavar="module:function", help="the handler: a function taking one echoq.Delivery")
    p.add_argument(
        "-q", "--queue", action="append", dest="queues", metavar="NAME", required=True,
        help="a queue to consume; repeat it for more (one Worker each)",
    )  # fmt: skip
    p.add_argument(
        "-c", "--concurrency", type=int, default=1, metavar="N", help="handler threads per queue (default 1)"
    )  # fmt: skip
    p.add_argument(
        "--lease-ms", type=int, default=DEFAULT_LEASE_MS, metavar="MS",
        help=f"lease per claim, ms (default {DEFAULT_LEASE_MS})",
    )  # fmt: skip
    p.add_argument(
        "--max-attempts", type=int, default=3, metavar="N",
        help="tries before a failing job is dead-lettered (default 3)",
    )  # fmt: skip
    p.add_argument(
        "--timeout-ms", type=int, default=None, metavar="MS",
        help="a handler's time limit, ms: past it its job is given up and retried (default: no limit)",
    )  # fmt: skip
    p.add_argument(
        "--grace-ms", type=int, default=DEFAULT_GRACE_MS, metavar="MS",
        help=f"at a stop, how long running handlers may take to finish, ms (default {DEFAULT_GRACE_MS})",
    )  # fmt: skip
    p.add_argument("--burst", action="store_true", help="drain the queues, then exit")
    p.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error"), metavar="LEVEL",
        help="debug, info, warning or error: the least severe log lines shown on stderr (default info)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """The command's body (inside :func:`echoq.__main__.reporting`): its exit status."""
    from .. import Queue
    from ..keyspace import Keyspace
    from ..server import connect, describe

    # Everything is checked before the first word to a server (which may start the user server).
    for name in args.queues:
        Keyspace(name)
    settings = _settings(args)
    handler = resolve(args.handler)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)

    client = connect()
    workers = [Worker(Queue(name, client), handler, **settings) for name in dict.fromkeys(args.queues)]
    log.info(
        "%s on queue%s %s; %s",
        args.handler,
        "s" if len(workers) > 1 else "",
        ", ".join(repr(w.queue.name) for w in workers),
        describe(client),
    )
    signals = StopOnSignals(workers)
    signals.install()
    try:
        _work_all(workers, args.burst)
    finally:
        signals.restore()
    if signals.at_once:
        return 128 + signals.received[1]
    return 0


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The Worker's settings from the options, each checked with the option's name."""
    timeout_ms = args.timeout_ms
    if timeout_ms is not None:
        whole("--timeout-ms", timeout_ms, 1, MAX_TIMEOUT_MS, unit="of milliseconds")
    return {
        "concurrency": whole("--concurrency", args.concurrency, 1, MAX_CONCURRENCY),
        "lease_ms": check("lease_ms", args.lease_ms, "--lease-ms"),
        "max_attempts": check("max_attempts", args.max_attempts, "--max-attempts"),
        "timeout_ms": timeout_ms,
        "grace_ms": whole("--grace-ms", args.grace_ms, 0, MAX_TIMEOUT_MS, unit="of milliseconds"),
    }


def resolve(spec: str) -> Callable[..., Any]:
    """The callable named ``module:function`` (the function may be ``Class.method``), imported
    as from the current folder; else :class:`InvalidArgument` in one line."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise InvalidArgument(f"the handler must be given as module:function (e.g. myapp.jobs:handle), got {spec!r}")
    here = str(Path.cwd())
    if "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)  # the console script's path starts at its own folder
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise InvalidArgument(
                f"no module named {exc.name!r} (for {spec!r}); run from the folder that holds it, or add that "
                "folder to PYTHONPATH"
            ) from None
        raise InvalidArgument(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 -- the module's own import-time error, in one line
        raise InvalidArgument(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    found: Any = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise InvalidArgument(f"module {module_name!r} has no attribute {attribute!r} (for {spec!r})") from None
    if not callable(found):
        raise InvalidArgument(
            f"{spec} is not callable ({type(found).__name__}); name a function that takes one echoq.Delivery"
        )
    return found


def _work_all(workers: list[Worker], burst: bool) -> list[WorkReport]:
    """Run every worker in a thread of its own while the main thread waits (and takes the
    signals); the first failure stops the others and is raised once all have returned."""
    reports: list[WorkReport] = []
    failures: list[BaseException] = []

    def one(worker: Worker) -> None:
        try:
            reports.append(worker.work(burst=burst))
        except BaseException as exc:  # noqa: BLE001 -- raised again on the main thread
            failures.append(exc)
            for other in workers:
                other.stop()

    threads = [threading.Thread(target=one, args=(w,), name=f"echoq-{w.name}") for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return reports
