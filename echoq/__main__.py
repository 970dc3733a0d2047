"""``python -m echoq check``: connect to Valkey and say which server it is. (The teaching
kit's commands -- chaos, its worker, workshop -- are ``python -m echoq.teaching ...``.)

Exit status: 0 done; 2 anything that went wrong -- bad options, an unreachable server, a
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
    parser.parse_args(argv)
    return reporting(_check)


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
