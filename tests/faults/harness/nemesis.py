"""The nemesis: faults chosen at random (from the run's seed) and combined, each injected for a
while and then healed, every one recorded in the history with when it began and ended.

Kinds: a partition between a node and PostgreSQL (both ways, or one way), between a node and
the clients and receiver, a lossy or slow link to PostgreSQL, a node paused (SIGSTOP) longer
than its leases, a node killed (-9) and started again, PostgreSQL's primary killed and started
again, a failover (the primary killed, the standby promoted), and a node's wall clock skewed.
At most two faults are active at once, and at most one of them is PostgreSQL's. With pools
(two clusters), a PostgreSQL fault strikes one of the clusters, and a partition from
PostgreSQL cuts a node from both."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Callable

from .client import Client, Unanswered
from .history import History
from .net import BRIDGE_IP, Network
from .nodes import Node
from .pg import Cluster

KINDS = [
    "partition-pg", "partition-pg-oneway", "partition-clients", "loss-pg", "slow-pg",
    "pause", "kill", "pg-restart", "failover", "skew",
]


@dataclass
class Active:
    kind: str
    node: str | None
    ends: float
    heal: Callable[[], None]
    t0: float
    value: dict


class Nemesis:
    def __init__(self, net: Network, clusters: list[Cluster], nodes: dict[str, Node],
                 history: History, seed: int, kinds: list[str] | None = None,
                 max_active: int = 2) -> None:
        self.net = net
        # The PostgreSQL clusters (two with pools): a PostgreSQL fault strikes one of them.
        self.clusters = clusters
        self.nodes = nodes
        self.history = history
        self.rng = random.Random(f"{seed}-nemesis")
        self.kinds = kinds or KINDS
        self.max_active = max_active
        self.active: list[Active] = []
        # When a fault last began on each node: a recovery probe overtaken by one is dropped.
        self.last_begun: dict[str, float] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.counts: dict[str, int] = {}
        self.error: Exception | None = None
        self.lock = threading.Lock()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
        for active in list(self.active):
            self._end(active)

    def _run(self) -> None:
        try:
            while not self.stopped.wait(self.rng.uniform(1.0, 4.0)):
                now = time.monotonic()
                for active in [a for a in self.active if a.ends <= now]:
                    self._end(active)
                if len(self.active) < self.max_active:
                    self._begin()
            for active in list(self.active):
                self._end(active)
        except Exception as error:
            # A nemesis that cannot go on is a failed run, never a quiet one.
            self.error = error
            raise

    def _end(self, active: Active) -> None:
        try:
            active.heal()
        finally:
            self.active.remove(active)
            self.history.fault(active.kind, active.t0, {**active.value, "healed": True})
        # How long until the nodes it touched take writes again, probed from the clients' side.
        touched = [active.node] if active.node else list(self.nodes)
        for name in touched:
            threading.Thread(target=self._probe, args=(active.kind, name, time.time()),
                             daemon=True).start()

    def _probe(self, kind: str, name: str, healed: float) -> None:
        """Enqueues into a queue of its own on node `name` until one is acknowledged, and
        records how long that took after the fault was healed."""
        client = Client([self.nodes[name].base], random.Random(), timeout=2.0)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not self.stopped.is_set():
            try:
                status, _ = client.request("POST", "/api/jobs", {"queue": "probe"})
                if status == 201 and self.last_begun.get(name, 0) > healed:
                    # Another fault began on the node first: this wait is not this fault's.
                    break
                if status == 201:
                    self.history.write({"kind": "recovery", "t0": healed, "t1": time.time(),
                                        "fault": kind, "node": name})
                    break
            except Unanswered:
                pass
            time.sleep(0.05)
        client.close()

    def _free_node(self) -> str | None:
        busy = {a.node for a in self.active}
        free = [n for n in self.nodes if n not in busy]
        return self.rng.choice(free) if free else None

    def _begin(self) -> None:
        kind = self.rng.choice(self.kinds)
        pg_busy = any(a.kind in ("pg-restart", "failover") for a in self.active)
        if kind in ("pg-restart", "failover") and pg_busy:
            return
        node = None if kind in ("pg-restart", "failover") else self._free_node()
        if kind not in ("pg-restart", "failover") and node is None:
            return
        duration = self.rng.uniform(3.0, 10.0)
        t0 = time.time()
        for name in [node] if node else list(self.nodes):
            self.last_begun[name] = t0
        value: dict = {"node": node, "seconds": round(duration, 2)}
        pgs = [host for each in self.clusters for host in each.servers]
        # Drawn only where there is a choice: a run of one cluster replays as before.
        cluster = self.clusters[0]
        if kind in ("pg-restart", "failover") and len(self.clusters) > 1:
            cluster = self.rng.choice(self.clusters)
            value["cluster"] = self.clusters.index(cluster)
        heal: Callable[[], None]
        if kind == "partition-pg":
            self.net.drop(node, pgs)
            heal = lambda n=node: self.net.heal(n)  # noqa: E731
        elif kind == "partition-pg-oneway":
            direction = self.rng.choice(["in", "out"])
            value["direction"] = direction
            self.net.drop(node, pgs, direction)
            heal = lambda n=node: self.net.heal(n)  # noqa: E731
        elif kind == "partition-clients":
            self.net.drop(node, [BRIDGE_IP])
            heal = lambda n=node: self.net.heal(n)  # noqa: E731
        elif kind == "loss-pg":
            share = self.rng.choice([10, 25, 50])
            value["share"] = share
            self.net.drop(node, pgs, "both", share)
            heal = lambda n=node: self.net.heal(n)  # noqa: E731
        elif kind == "slow-pg":
            value["link"] = self.net.slow(node, self.rng.choice([50, 200, 500]))
            heal = lambda n=node: self.net.heal(n)  # noqa: E731
        elif kind == "pause":
            self.nodes[node].pause()
            heal = self.nodes[node].resume
        elif kind == "kill":
            self.nodes[node].kill()
            heal = self.nodes[node].start
        elif kind == "skew":
            seconds = self.rng.choice([-1, 1]) * self.rng.choice([5, 30, 90, 180])
            value["skew_s"] = seconds
            self.nodes[node].set_skew(seconds)
            heal = lambda n=node: self.nodes[n].set_skew(0)  # noqa: E731
        elif kind == "pg-restart":
            primary = cluster.primary
            value["server"] = primary
            duration = self.rng.uniform(0.5, 3.0)
            value["seconds"] = round(duration, 2)
            cluster.kill(primary)
            heal = lambda c=cluster, p=primary: c.restart(p)  # noqa: E731
        elif kind == "failover":
            value["from"] = cluster.primary
            value["promoted_in_s"] = round(cluster.failover(), 3)
            value["to"] = cluster.primary
            duration = 0.0
            heal = lambda: None  # noqa: E731
        else:
            return
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.history.fault(kind, t0, value)
        self.active.append(Active(kind, node, time.monotonic() + duration, heal, t0, value))
