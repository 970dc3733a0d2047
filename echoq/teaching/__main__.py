"""``python -m echoq.teaching``: the kit's commands. ``chaos`` kills real worker processes
and audits that no job was lost; ``worker`` is the process it starts (the keyed consumer, or
with ``--naive`` the pop-and-process contrast, dying at ``--kill-*`` points); ``workshop``
runs one shared Valkey for a class (docs/WORKSHOP.md). The library's own command is
``python -m echoq check``.

Exit status: 0 done; 1 a chaos run found a job lost or an effect duplicated; 2 anything
that went wrong -- bad options, an unreachable server, a refused password or ACL, any
:class:`~echoq.EchoqError` -- reported as ONE line on stderr (``echoq: ...``), never a
traceback; 130 interrupted (Ctrl-C)."""

from __future__ import annotations

import argparse
import json
import sys

from echoq.__main__ import one_line, reporting


def _add_worker(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="consume a queue (the process the chaos lab starts and kills)")
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--concurrency", type=int, default=1, help="drain threads (default 1)")
    p.add_argument("--lease-ms", type=int, default=500, help="lease per claim, ms (default 500)")
    p.add_argument("--max-stalled", type=int, default=4, help="the stall count that dead-letters a job (default 4)")
    p.add_argument("--max-attempts", type=int, default=5, help="deliveries before a failing job is dead (default 5)")
    p.add_argument("--beat-ms", type=int, default=100, help="stalled check every this many ms (default 100)")
    p.add_argument("--work-ms", type=int, default=0, help="each job works a random 0..N ms (default 0)")
    p.add_argument("--kill-rate", type=float, default=0.0, help="fraction of deliveries that SIGKILL this process")
    p.add_argument("--kill-at", default="after_claim,mid_job,after_effect", help="fault points to die at (comma list)")
    p.add_argument("--seed", type=int, default=None, help="seed for the kills and work times")
    p.add_argument("--naive", action="store_true", help="CONTRAST: run the pop-and-process loop")
    p.add_argument("--burst", action="store_true", help="drain the queue and exit")
    p.add_argument("--quiet", action="store_true", help="print no report at exit")


def _add_chaos(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chaos", help="kill real worker processes at random and prove no job is lost")
    p.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    p.add_argument("--jobs", type=int, default=2000, help="jobs to run (default 2000)")
    p.add_argument(
        "--kill-rate",
        type=float,
        default=0.01,
        help="fraction of deliveries where a worker SIGKILLs itself at a random fault point (default 0.01)",
    )
    p.add_argument(
        "--kill-every",
        type=float,
        default=0.5,
        help="mean seconds between SIGKILLs of a random worker at a random moment; 0 = never (default 0.5)",
    )
    p.add_argument(
        "--kill-at", default="after_claim,mid_job,after_effect", help="fault points a worker may die at (comma list)"
    )
    p.add_argument("--lease-ms", type=int, default=500, help="lease per claim, ms (default 500)")
    p.add_argument("--max-stalled", type=int, default=4, help="the stall count that dead-letters a job (default 4)")
    p.add_argument("--work-ms", type=int, default=2, help="each job works a random 0..N ms (default 2)")
    p.add_argument("--seed", type=int, default=None, help="seed for kills and work times (default: random)")
    p.add_argument(
        "--timeout", type=float, default=120.0, help="give up when no job settled for this many seconds (default 120)"
    )
    p.add_argument("--keep", action="store_true", help="leave the run's queue on the server (the report says where)")
    p.add_argument("--naive", action="store_true", help="CONTRAST: workers run the naive pop-and-process loop")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_workshop(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "workshop", help="one shared Valkey for a class: up, hub, status, export, grade, down (see docs/WORKSHOP.md)"
    )
    actions = p.add_subparsers(dest="action", required=True)
    folder = argparse.ArgumentParser(add_help=False)
    folder.add_argument("--dir", help="the workshop folder (default: $ECHOQ_WORKSHOP, else ./echoq-workshop)")
    up = actions.add_parser("up", parents=[folder], help="start (or attach to) the class server; create the users")
    who = up.add_mutually_exclusive_group()
    who.add_argument("--roster", help="file with one JupyterHub user name per line")
    who.add_argument("--count", type=int, help="make N learners: learner-01, learner-02, ...")
    up.add_argument("--class", dest="class_name", help="the class's name (default: class, or the folder's)")
    up.add_argument("--url", help="attach to this server (redis://[user@]host:port; no password in it)")
    up.add_argument("--password-file", help="file holding the admin password for --url (or ECHOQ_ADMIN_PASSWORD)")
    up.add_argument("--bind", help="address(es) a started server binds (default: as before, else 127.0.0.1)")
    up.add_argument("--port", type=int, help="port of a started server (default: a free one)")
    up.add_argument("--host", help="address learners' kernels reach the server at (default: the bind address)")
    up.add_argument("--instructor", action="append", default=[], help="hub user who may open the dashboard")
    up.add_argument("--maxmemory", help="memory cap of a started server (default: as before, else 1gb)")
    up.add_argument("--busy-ms", help="a script running longer makes the server answer BUSY (default 1000)")
    up.add_argument("--per-learner-connections", help="the watchdog closes a learner's connections beyond (100)")
    up.add_argument("--lua-memory", help="the watchdog flushes the Lua heap above this (default 128mb)")
    up.add_argument("--no-watch", action="store_true", help="do not start the class's watchdog")
    watch = actions.add_parser("watch", parents=[folder], help="the class's watchdog, in the foreground")
    watch.add_argument("--tick", type=float, default=0.1, help="seconds between looks (default 0.1)")
    actions.add_parser(
        "restart", parents=[folder], help="restart the class server: users, scripts and limits in place first"
    )
    status = actions.add_parser("status", parents=[folder], help="what the class server holds, learner by learner")
    status.add_argument("--show-urls", action="store_true", help="print each learner's VALKEY_URL (with password)")
    free = actions.add_parser(
        "free", parents=[folder], help="delete every key of one learner's namespace: the memory they filled"
    )
    free.add_argument("learner", help="the learner's id, as `workshop status` lists it")
    hub = actions.add_parser("hub", parents=[folder], help="run JupyterHub for the class on this machine (offline)")
    hub.add_argument("--ip", default="127.0.0.1", help="address the hub listens on (default 127.0.0.1)")
    hub.add_argument("--port", type=int, default=8000, help="its port (default 8000)")
    hub.add_argument("--homes", default="/home", help="where each learner's home (mode 0700) is made (default /home)")
    hub.add_argument("--user-prefix", default="jupyter-", help="learners' Unix users are PREFIX<learner> (jupyter-)")
    hub.add_argument("--learner-python", help="the Python learners' servers run, readable by all (default: this one)")
    hub.add_argument("--terminals", action="store_true", help="give learners a Terminal (default: none)")
    hub.add_argument("--memory", default="2G", help="memory cap of each learner's process, e.g. 1G, 512M (2G)")
    hub.add_argument("--tasks", type=int, default=256, help="processes and threads a learner may run at once (256)")
    export = actions.add_parser(
        "export", parents=[folder], help="the gradebook: one row per roster learner and exercise (CSV, JSON)"
    )
    export.add_argument("--csv", help="the CSV file to write, mode 0600 ('-': standard output)")
    export.add_argument("--json", help="the JSON file to write, mode 0600 ('-': standard output)")
    k8s = actions.add_parser(
        "k8s", parents=[folder], help="the class on Kubernetes: Valkey manifests and Zero to JupyterHub values"
    )
    k8s.add_argument("--out", required=True, help="folder for echoq-valkey.yaml, echoq-roster.yaml, values.yaml")
    k8s.add_argument("--namespace", default="jhub", help="the hub's namespace (default jhub)")
    k8s.add_argument("--image", default="", help="the learners' image, name:tag, with echoq installed")
    k8s.add_argument("--memory", default="1G", help="each learner's memory limit (default 1G)")
    k8s.add_argument("--cpu", type=float, default=1.0, help="each learner's CPU limit (default 1)")
    grade = actions.add_parser(
        "grade", parents=[folder], help="judge every learner's newest submissions again, as them (root; grades.json)"
    )
    grade.add_argument("--timeout", type=float, default=120.0, help="seconds each judgement may take (default 120)")
    grade.add_argument(
        "--learner-python", help="the Python learners run, runnable by them (default: the class hub's, else this one)"
    )
    down = actions.add_parser("down", parents=[folder], help="delete the users and keys; stop a started server")
    down.add_argument("--keep-server", action="store_true", help="leave a server `up` started running")
    down.add_argument(
        "--purge", action="store_true", help="also remove the hub's folder: its passwords, cookie secret, database, log"
    )


def _workshop(args: argparse.Namespace) -> int:
    from . import workshop

    if args.action == "up":
        try:
            roster = _text_file(args.roster, "one JupyterHub user name per line").splitlines() if args.roster else None
            password = _text_file(args.password_file, "the admin password").strip() if args.password_file else None
        except ValueError as exc:
            print(f"echoq: {exc}", file=sys.stderr)
            return 2
        _, lines = workshop.up(
            args.dir,
            roster=roster,
            count=args.count,
            class_name=args.class_name,
            url=args.url,
            admin_password=password,
            bind=args.bind,
            port=args.port,
            host=args.host,
            instructors=args.instructor,
            maxmemory=args.maxmemory,
            settings={
                name: value
                for name, value in (
                    ("busy-reply-threshold", args.busy_ms),
                    ("per-learner-connections", args.per_learner_connections),
                    ("lua-memory", args.lua_memory),
                )
                if value is not None
            },
            watch=not args.no_watch,
        )
    elif args.action == "watch":
        from .workshop import watch

        return watch.main(args.dir, tick_s=args.tick)
    elif args.action == "hub":
        from .workshop import hub

        options = hub.HubOptions(
            ip=args.ip,
            port=args.port,
            homes=args.homes,
            user_prefix=args.user_prefix,
            learner_python=args.learner_python or sys.executable,
            terminals=args.terminals,
            memory=args.memory,
            tasks=args.tasks,
        )
        config, lines = hub.prepare(args.dir, options)
        return hub.run(config, lines, options)
    elif args.action == "export":
        from .workshop import export

        if not (args.csv or args.json):
            print("echoq: say where the gradebook goes: --csv FILE, --json FILE, or both ('-': standard output)",
                  file=sys.stderr)  # fmt: skip
            return 2
        found = workshop.Workshop.load(args.dir)
        people = [(lid, ln.display, ln.hub_user) for lid, ln in found.learners.items()]
        from .workshop import grade

        rows = export.rows(found.instructor(), people, grade.load(found.dir))
        lines = []
        for kind, given, text in (("CSV", args.csv, export.to_csv), ("JSON", args.json, export.to_json)):
            if given == "-":
                sys.stdout.write(text(rows))
            elif given:
                try:
                    path = export.write(given, text(rows))
                except OSError as exc:
                    print(f"echoq: cannot write {given}: {exc.strerror}", file=sys.stderr)
                    return 2
                lines.append(
                    f"gradebook ({kind}, mode 0600): {len(rows)} rows, every exercise of {len(found.learners)} "
                    f"learner(s), written to {path}"
                )
        if not lines:
            return 0
    elif args.action == "grade":
        from .workshop import grade

        lines = grade.grade(args.dir, timeout_s=args.timeout, learner_python=args.learner_python)
    elif args.action == "status":
        lines = workshop.status(args.dir, show_urls=args.show_urls)
    elif args.action == "free":
        from .workshop import admin

        lines = admin.free(args.dir, args.learner)
    elif args.action == "restart":
        from .workshop import admin

        lines = admin.restart(args.dir)
    elif args.action == "k8s":
        from .workshop import k8s

        lines = k8s.k8s(
            args.dir, args.out, namespace=args.namespace, image=args.image, memory=args.memory, cpu=args.cpu
        )
    else:
        lines = workshop.down(args.dir, keep_server=args.keep_server, purge=args.purge)
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m echoq.teaching", description="The echoq teaching kit's commands.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_worker(sub)
    _add_chaos(sub)
    _add_workshop(sub)
    args = parser.parse_args(argv)
    if getattr(args, "work_ms", 0) < 0:
        return one_line(f"--work-ms must be 0 or more (each job works a random 0..N ms), got {args.work_ms}")
    return reporting(lambda: _command(args))


def _command(args: argparse.Namespace) -> int:
    if args.command == "workshop":
        return _workshop(args)
    if args.command == "worker":
        from .chaos import worker_main
        from .faults import checkpoints

        report = worker_main(
            queue_name=args.queue,
            lease_ms=args.lease_ms,
            max_stalled=args.max_stalled,
            max_attempts=args.max_attempts,
            concurrency=args.concurrency,
            kill_rate=args.kill_rate,
            kill_at=checkpoints(args.kill_at),
            seed=args.seed,
            work_ms=args.work_ms,
            beat_ms=args.beat_ms,
            naive=args.naive,
            burst=args.burst,
        )
        if not args.quiet:
            print(json.dumps(report, default=str))
        return 0
    if args.command == "chaos":
        from .chaos import run_chaos
        from .faults import checkpoints

        result = run_chaos(
            workers=args.workers,
            jobs=args.jobs,
            kill_rate=args.kill_rate,
            kill_every_s=args.kill_every,
            kill_at=checkpoints(args.kill_at),
            lease_ms=args.lease_ms,
            max_stalled=args.max_stalled,
            work_ms=args.work_ms,
            seed=args.seed,
            naive=args.naive,
            timeout_s=args.timeout,
            progress=not args.no_progress and not args.json,
            keep_queue=args.keep,
        )
        if args.json:
            data = result.to_dict()
            data.pop("timeline")
            print(json.dumps(data))
        else:
            print(result.format())
        return 0 if result.ok else 1
    return 0


def _text_file(path: str, what: str) -> str:
    """A file the instructor gave, as UTF-8 text; ValueError in one line when it cannot be read."""
    from pathlib import Path

    try:
        return Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at position {exc.start}); "
            f"save it as UTF-8 ({what})"
        ) from None


if __name__ == "__main__":
    sys.exit(main())
