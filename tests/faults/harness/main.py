"""One run of the fault harness: the network, PostgreSQL (a primary and a synchronous standby),
the Tenax nodes, the receiver; the workload and the nemesis for the run's time; then every fault
healed, the jobs drained, the final state read, everything stopped and removed. The checker
(`checker.py`, separate from all of this) then reads what the run wrote.

    python3 -m harness.main --minutes 3 --seed 1 --out DIR [--bin target/debug/tenax] [--pools 2]

With `--pools 2` the nodes' database is a catalogue with two pools (docs/postgres.md, "Pools"):
one more database on the first cluster, and a second cluster (a primary and a synchronous
standby of its own), registered over the API before the workload's queues are made, so that
its queues spread over both; the nemesis's PostgreSQL faults then strike either cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

from .client import Client
from .final import read, wait_drained
from .history import History
from .mover import Mover
from .nemesis import KINDS, Nemesis
from .net import BRIDGE_IP, Network
from .nodes import Node, faketime_lib
from .pg import Cluster
from .receiver import Receiver
from .workload import Setup, Workload, prepare, retry_forever

HOSTS = [("pg1", "10.77.0.21"), ("pg2", "10.77.0.22"),
         ("n1", "10.77.0.11"), ("n2", "10.77.0.12"), ("n3", "10.77.0.13")]
# The second pool's cluster, with --pools 2.
POOL_HOSTS = [("pg3", "10.77.0.23"), ("pg4", "10.77.0.24")]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--bin", default="target/debug/tenax")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--claimers", type=int, default=2)
    parser.add_argument("--pools", type=int, choices=[0, 2], default=0)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**9)
    os.makedirs(args.out, exist_ok=True)
    # A run starts from nothing: an earlier run's logs and data would mix with its own.
    for leftover in ("nodes", "pg", "history.jsonl", "final.json"):
        path = os.path.join(args.out, leftover)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    binary = os.path.abspath(args.bin)
    log(f"seed {seed}: replay with --seed {seed}")
    if os.geteuid() != 0:
        log("the harness makes network namespaces: run it as root")
        return 2
    if faketime_lib() is None:
        log("libfaketime is missing (apt-get install faketime): clock skew faults are off")

    net = Network()
    nodes: dict[str, Node] = {}
    clusters: list[Cluster] = []
    receiver = None
    history = History(f"{args.out}/history.jsonl")
    try:
        log("making the network")
        net.create(HOSTS + (POOL_HOSTS if args.pools else []))
        log(f"netem: {'yes' if net.netem else 'no (a token bucket slows links instead)'}")
        log("making PostgreSQL: a primary and a synchronous standby")
        cluster = Cluster(net, ["pg1", "pg2"], f"{args.out}/pg")
        clusters.append(cluster)
        cluster.create()
        if args.pools:
            log("making the second pool's PostgreSQL: a primary and a synchronous standby")
            clusters.append(Cluster(net, ["pg3", "pg4"], f"{args.out}/pg-b"))
            clusters[1].create()
        key = f"{args.out}/secrets.key"
        if os.path.exists(key):
            os.remove(key)
        subprocess.run([binary, "secrets", "generate-key", key], check=True,
                       stdout=subprocess.DEVNULL)
        for name in ("n1", "n2", "n3"):
            nodes[name] = Node(name, net, binary, cluster.url(), key, f"{args.out}/nodes", [])
            nodes[name].start()
        for node in nodes.values():
            if not node.wait_up():
                raise RuntimeError(f"node {node.name} did not come up: {node.dir}/server.log")
        receiver = Receiver(BRIDGE_IP, history, seed, fail_share=0.2)
        receiver.start()
        bases = [n.base for n in nodes.values()]
        setup = Setup()
        admin = Client(bases, random.Random(seed))
        if args.pools:
            register_pools(admin, clusters)
        prepare(admin, setup, receiver.url, history)

        kinds = [k for k in args.kinds.split(",") if k]
        if faketime_lib() is None and "skew" in kinds:
            kinds.remove("skew")
        workload = Workload(bases, history, setup, seed)
        nemesis = Nemesis(net, clusters, nodes, history, seed, kinds)
        # With pools, queues move between them all along (the Zaqar queue stays).
        mover = Mover(bases, history, seed, [*setup.work_queues, "hooks", "ticks"]) \
            if args.pools else None
        log(f"running the workload and the nemesis for {args.minutes} min ({', '.join(kinds)})")
        workload.start(args.producers, args.workers, args.claimers)
        nemesis.start()
        if mover is not None:
            mover.start()
        deadline = time.monotonic() + args.minutes * 60
        while time.monotonic() < deadline and nemesis.error is None:
            time.sleep(min(10.0, max(0.0, deadline - time.monotonic())))
            log(f"{history.ops} operations, {history.faults} fault records")

        log("healing every fault")
        nemesis.stop()
        if nemesis.error is not None:
            raise RuntimeError(f"the nemesis failed: {nemesis.error}")
        net.heal_all()
        for each in clusters:
            each.heal()
        for node in nodes.values():
            node.heal()
        for node in nodes.values():
            if not node.wait_up():
                raise RuntimeError(f"node {node.name} did not come back: {node.dir}/server.log")
        if mover is not None:
            # A move left unfinished keeps its queues from taking writes: finished first.
            mover.stop()
            log(f"moves: {mover.counts}")
        history.write({"kind": "healed", "t0": time.time(), "value": {}})
        workload.stop_producing()
        retry_forever(admin, "POST", "/api/schedules/tick/pause", {})
        history.write({"kind": "schedule-paused", "t0": time.time(), "value": {}})
        workload.drain()
        drained_in = wait_drained(admin, setup, stalled_after=60)
        history.write({"kind": "drained", "t0": time.time(), "value": {"seconds": drained_in}})
        log(f"drained in {drained_in:.0f} s" if drained_in >= 0
            else "NOT drained: nothing was done for 60 s")
        workload.stop()
        log("reading the final state")
        state = read(admin, setup)
        state["nemesis"] = nemesis.counts
        state["seed"] = seed
        state["minutes"] = args.minutes
        state["failovers"] = sum(each.failovers for each in clusters)
        state["pools"] = args.pools
        state["moves"] = mover.counts if mover is not None else {}
        state["leadership"] = leadership(nodes)
        with open(f"{args.out}/final.json", "w") as f:
            json.dump(state, f)
        return 0
    finally:
        log("stopping and removing everything")
        for node in nodes.values():
            try:
                node.stop()
            except Exception as error:  # noqa: BLE001 (tearing down whatever is left)
                log(f"stopping {node.name}: {error}")
        if receiver is not None:
            receiver.stop()
        for each in clusters:
            each.stop()
        net.remove()
        history.close()


def register_pools(admin: Client, clusters: list[Cluster]) -> None:
    """Pool `a`, a second database on the catalogue's cluster, and pool `b`, the second
    cluster's; then waits until every node has loaded both (they take queues)."""
    pools = {"a": clusters[0].url("tenax_a"), "b": clusters[1].url("tenax")}
    for name, uri in pools.items():
        retry_forever(admin, "PUT", f"/api/pools/{name}", {"uri": uri, "weight": 1})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = retry_forever(admin, "GET", "/api/pools", None)
        if len(listed["pools"]) == 2 and all(p["ready"] for p in listed["pools"]):
            log("pools a and b registered; every node has loaded them")
            return
        time.sleep(0.1)
    raise RuntimeError(f"the pools did not become ready: {listed}")


def leadership(nodes: dict[str, Node]) -> list[dict]:
    """When each node took the lead, from its log (JSON lines are not used: the text's time)."""
    taken = []
    for node in nodes.values():
        try:
            with open(f"{node.dir}/server.log") as f:
                for line in f:
                    if "this server leads the maintenance" in line:
                        taken.append({"node": node.name, "at": line.split(" ")[0]})
        except OSError:
            pass
    return taken


if __name__ == "__main__":
    sys.exit(main())
