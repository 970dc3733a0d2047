"""``python -m echoq check``: connect to Valkey and say which server it is.
``python -m echoq server start|stop|status|url``: the user server, the one that keeps this
user's jobs when no ``VALKEY_URL`` is set (see :mod:`echoq.server`).
``python -m echoq worker module:function --queue NAME``: run a handler on a queue's jobs
until Ctrl-C or SIGTERM (see :mod:`echoq.worker.command`, which also lists its own exit
statuses). (The teaching kit's commands -- chaos, its worker, workshop -- are
``python -m echoq.teaching ...``.)

Exit status: 0 done (``server status``: running); 3 ``server status`` of a server that is not
running; 2 anything that went wrong -- bad options, an unreachable server, a
refused password or ACL, any :class:`~echoq.EchoqError` -- reported as ONE line on stderr
(``echoq: ...``), never a traceback; 130 interrupted (Ctrl-C).

``python -m echoq dead list|requeue|purge QUEUE``: the queue's dead letters (on the server
:func:`echoq.connect` reaches). ``list`` prints one page (``--offset``, ``--limit`` up to
1000); ``requeue`` and ``purge`` take JOB ids or ``--all``. Exit status: 0 done (every id
named was requeued or purged); 1 some id was not (each such id named on stdout: not dead,
or gone); 2 and 130 as above."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import redis

from .errors import EchoqError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="echoq", description="The echoq reliable queue (the kit's commands: python -m echoq.teaching)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="connect to Valkey and say which server it is")
    manage = sub.add_parser("server", help="the user server: the one that keeps your jobs when VALKEY_URL is not set")
    manage.add_argument("action", choices=("start", "stop", "status", "url"))
    _dead_parser(sub)
    from .worker import command as worker_command

    worker_command.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "server":
        return reporting(lambda: _server(args.action))
    if args.command == "dead":
        return reporting(lambda: _dead(args))
    if args.command == "worker":
        return reporting(lambda: worker_command.run(args))
    return reporting(_check)


def _server(action: str) -> int:
    from .server import stop_user_server, user_home, user_server

    home = user_home()
    if action == "stop":
        print(stop_user_server() or f"no user server runs in {home}")
        return 0
    server = user_server(start=action in ("start", "url"))
    if action == "url":
        assert server is not None
        print(server.url)  # holds the password: it is yours, like the folder it comes from
        return 0
    if server is None:
        print(f"not running; its data folder is {home} (python -m echoq server start, or any use, starts it)")
        return 3
    aof = home / "appendonlydir"
    size = sum(p.stat().st_size for p in aof.glob("*")) if aof.is_dir() else 0
    print(
        f"running (pid {server.pid()}): data in {home} (append-only file {size:,} bytes), "
        f"socket {server.socket}; python -m echoq server stop stops it"
    )
    return 0


def _dead_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from .queue import DEAD_PAGE_MAX

    dead = sub.add_parser("dead", help="a queue's dead letters: list them, requeue them, purge them")
    actions = dead.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="one page of dead letters, longest dead first")
    listing.add_argument("queue", help="the queue's name")
    listing.add_argument("--offset", type=int, default=0, help="skip this many (the next page's offset is printed)")
    listing.add_argument("--limit", type=int, default=100, help=f"page size, 1..{DEAD_PAGE_MAX} (default 100)")
    for name, what in (
        ("requeue", "back to pending at their place in line, with fresh tries"),
        ("purge", "deleted for good, rows and all"),
    ):
        move = actions.add_parser(name, help=f"dead letters {what}")
        move.add_argument("queue", help="the queue's name")
        move.add_argument("ids", nargs="*", metavar="JOB_ID", help="the dead jobs' ids")
        move.add_argument("--all", action="store_true", help="every dead letter of the queue")


def _dead(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from .errors import InvalidArgument
    from .queue import Queue

    if args.action != "list" and args.all == bool(args.ids):
        raise InvalidArgument(f"dead {args.action}: name JOB ids, or --all (not both, not neither)")
    queue = Queue(args.queue)
    if args.action == "list":
        page = queue.dead_letters(args.offset, args.limit)
        for letter in page.letters:
            died = datetime.fromtimestamp(letter.died_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            error = (letter.error or "").splitlines()[0][:200] if letter.error else ""
            why = letter.reason or ("no row" if letter.payload is None else "?")
            print(f"{letter.job_id}  died {died}  {why}  tries {letter.attempts}" + (f"  {error}" if error else ""))
        shown = f"{args.offset + 1}..{args.offset + len(page.letters)}" if page.letters else "none"
        more = f"; next page: --offset {page.next_offset}" if page.next_offset is not None else ""
        print(f"{shown} of {page.total:,} dead in {queue.name}{more}")
        return 0
    if args.all:
        moved = queue.requeue_all_dead() if args.action == "requeue" else queue.purge_all_dead()
        print(f"{args.action}d {moved:,} dead letters of {queue.name}")
        return 0
    outcomes = queue.requeue_dead(args.ids) if args.action == "requeue" else queue.purge_dead(args.ids)
    done = f"{args.action}d"
    for job_id, outcome in zip(args.ids, outcomes, strict=True):
        if outcome.value != done:
            print(f"{job_id}: not {done}: " + ("its job is not dead" if outcome.value == "not_dead" else "gone"))
    count = sum(outcome.value == done for outcome in outcomes)
    print(f"{done} {count:,} of {len(outcomes):,} named in {queue.name}")
    return 0 if count == len(outcomes) else 1


def _check() -> int:
    from .server import connect, describe

    print(describe(connect()))
    return 0


def reporting(command: Callable[[], int]) -> int:
    """Run a command, every failure as the one line :func:`one_line` prints (exit 2), Ctrl-C as 130."""
    try:
        return command()
    except EchoqError as exc:
        return one_line(str(exc))
    except KeyboardInterrupt:
        print("echoq: interrupted", file=sys.stderr)
        return 130
    except (redis.RedisError, OSError) as exc:
        # A failure the library did not type (it should have): still one line, no traceback.
        return one_line(f"{type(exc).__name__}: {exc}")


def one_line(message: str) -> int:
    """Print the first line of ``message`` as ``echoq: ...`` on stderr; the exit status 2."""
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"echoq: {first}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
