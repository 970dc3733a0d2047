"""``python -m echoq``: small command-line tools around the kit."""

from __future__ import annotations

import argparse
import sys

from .errors import EchoqError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="echoq", description="The echoq reliable-queue kit.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="connect to Valkey and say which server it is")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            from .server import connect, describe

            print(describe(connect()))
            return 0
    except EchoqError as exc:
        print(f"echoq: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
