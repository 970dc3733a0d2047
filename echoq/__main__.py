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
(``echoq: ...``), never a traceback; 130 interrupted (Ctrl-C)."""

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
    from .worker import command as worker_command

    worker_command.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "server":
        return reporting(lambda: _server(args.action))
    if args.command == "worker":
        return reporting(lambda: worker_command.run(args))
    return reporting(_check)


def _server(action: str) -> int:
    from .server import stop_user_server, user_home, user_server

    home = user_home()
    if action == "stop":
        print(f"stopped the user server in {home}" if stop_user_server() else f"no user server runs in {home}")
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
