#!/usr/bin/env python3
"""One database against two pools on two PostgreSQL clusters (docs/postgres.md, "Pools").

Run with two throwaway clusters and a release build, under the CPU lock:

    flock /tmp/tenax-cpu.lock tests/postgres/with-cluster.sh sh -c \\
        'TENAX_PG_URL_B=$TENAX_PG_URL tests/postgres/with-cluster.sh \\
         python3 tests/postgres/one-vs-two-pools.py target/release/tenax [ROUNDS] [SCENARIO,...]'

For each round and scenario, in alternating order, on fresh databases and a fresh server:
- one: the server's database (cluster A) holds every queue, as without pools;
- two: the server's database is a catalogue with two pools, one on cluster A and one on
  cluster B, registered over the API; one bench's queue is on each pool.
In both, two `tenax bench` processes run together against the one server, each on its own
queue with half the workers and half the jobs. Printed: total jobs/s (the jobs of both over
the longer run), and CPU ms per job of the Tenax server, of PostgreSQL (every postgres
process of both clusters) and of the benches; then the medians. On a machine of few cores
the clusters share them, so the throughput may not grow: PostgreSQL's CPU per job, and how it
splits between the clusters, is what carries to machines where each cluster has its own.
"""

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

from cpu import children_cpu, cpu_of, postgres_pids, spent

CLUSTER_A = os.environ["TENAX_PG_URL"].rsplit("/", 1)[0]
CLUSTER_B = os.environ["TENAX_PG_URL_B"].rsplit("/", 1)[0]
TENAX = os.path.abspath(sys.argv[1])
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SCENARIOS = ["take-complete", "mixed"]
if len(sys.argv) > 3:
    SCENARIOS = sys.argv[3].split(",")
JOBS = 100_000
WORKERS = 4
PORT = 7995
URL = f"http://127.0.0.1:{PORT}"


def psql(cluster, db, sql):
    out = subprocess.run(
        ["psql", "-X", "-q", "-t", "-A", f"{cluster}/{db}", "-c", sql],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def commits():
    """Transactions committed so far in the bench's databases, both clusters."""
    sql = "SELECT coalesce(sum(xact_commit), 0) FROM pg_stat_database WHERE datname LIKE 'tenax_bench%'"
    return sum(int(psql(cluster, "postgres", sql)) for cluster in (CLUSTER_A, CLUSTER_B))


def cluster_pids(cluster):
    """The processes of `cluster`: its postmaster and the postmaster's children."""
    data = psql(cluster, "postgres", "SHOW data_directory")
    with open(f"{data}/postmaster.pid") as f:
        postmaster = int(f.readline())
    pids = [postmaster]
    for pid in postgres_pids():
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == postmaster:
                    pids.append(pid)
        except (OSError, ValueError):
            pass
    return pids


def request(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{URL}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            text = response.read()
    except urllib.error.HTTPError as error:
        raise SystemExit(f"{method} {path}: {error.code} {error.read()!r}")
    return json.loads(text) if text else None


def fresh_databases():
    for cluster, names in ((CLUSTER_A, ["tenax_bench", "tenax_bench_pool_a"]),
                           (CLUSTER_B, ["tenax_bench_pool_b"])):
        for name in names:
            psql(cluster, "postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    psql(CLUSTER_A, "postgres", "CREATE DATABASE tenax_bench")


def start_server(log):
    key = os.environ.get("TENAX_SECRETS_KEY_FILE")
    if not key:
        key = f"/tmp/one-vs-two-pools-{os.getpid()}.key"
        subprocess.run([TENAX, "secrets", "generate-key", key], check=True, stdout=subprocess.DEVNULL)
        os.environ["TENAX_SECRETS_KEY_FILE"] = key
    proc = subprocess.Popen(
        [TENAX, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", f"/tmp/one-vs-two-pools-{PORT}",
         "--database-url", f"{CLUSTER_A}/tenax_bench", "--log-requests", "false"],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"),
    )
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{URL}/healthz", timeout=1)
            return proc
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the server did not start: see {log}")


def two_pools():
    """Registers a pool on each cluster, waits until both take queues, and answers a queue
    name on each: the first of bench-a0, bench-a1, … whose probe job's id names the pool."""
    request("PUT", "/api/pools/a", {"uri": f"{CLUSTER_A}/tenax_bench_pool_a", "weight": 1})
    request("PUT", "/api/pools/b", {"uri": f"{CLUSTER_B}/tenax_bench_pool_b", "weight": 1})
    for _ in range(200):
        if all(p["ready"] for p in request("GET", "/api/pools")["pools"]):
            break
        time.sleep(0.05)
    on = {}
    for i in range(100):
        queue = f"bench-q{i}"
        job = request("POST", "/api/jobs", {"queue": queue})
        request("DELETE", f"/api/jobs/{job['id']}")
        on.setdefault(job["id"] % 64, queue)
        if len(on) == 2:
            return [on[1], on[2]]
    raise SystemExit(f"no queue for each pool among 100: {on}")


def run(scenario, pools):
    fresh_databases()
    server = start_server(f"/tmp/one-vs-two-pools-{scenario}-{pools}.log")
    try:
        return measure(scenario, pools, server)
    finally:
        server.kill()
        server.wait()


def measure(scenario, pools, server):
    queues = two_pools() if pools == 2 else [None, None]
    time.sleep(1.5)  # the server leads, and its first beats are done
    before = (cpu_of([server.pid]), cpu_of(postgres_pids()), commits(), children_cpu(),
              cpu_of(cluster_pids(CLUSTER_B)))
    benches = []
    for queue in queues:
        args = [TENAX, "bench", "--url", URL, "--scenario", scenario, "--workers", str(WORKERS // 2),
                "--jobs", str(JOBS // 2), "--max-seconds", "120", "--json"]
        if queue:
            args += ["--queue", queue]
        benches.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    reports = []
    for bench in benches:
        out, _ = bench.communicate()
        reports.append(json.loads(out)["scenarios"][0])
    after = (cpu_of([server.pid]), cpu_of(postgres_pids()), commits(), children_cpu(),
             cpu_of(cluster_pids(CLUSTER_B)))
    for r in reports:
        if r.get("error"):
            raise SystemExit(f"{scenario} with {pools} pool(s): {r['error']}")
    done = sum(r["jobs"] for r in reports)
    seconds = max(r["seconds"] for r in reports)
    return {
        "rate": done / seconds,
        "tenax_ms": 1000 * spent(before[0], after[0]) / done,
        "pg_ms": 1000 * spent(before[1], after[1]) / done,
        # Of which cluster B's (the second pool's alone).
        "pg_b_ms": 1000 * spent(before[4], after[4]) / done,
        "xacts": (after[2] - before[2]) / done,
        "client_ms": 1000 * (after[3] - before[3]) / done,
    }


def main():
    results = {}
    for round_ in range(1, ROUNDS + 1):
        for scenario in SCENARIOS:
            for pools in ([1, 2] if round_ % 2 == 1 else [2, 1]):
                r = run(scenario, pools)
                results.setdefault((scenario, pools), []).append(r)
                print(f"round {round_} {scenario} pools={pools}: {r['rate']:.0f} jobs/s, CPU ms/job: "
                      f"Tenax {r['tenax_ms']:.4f}, PostgreSQL {r['pg_ms']:.4f} (cluster B {r['pg_b_ms']:.4f}), "
                      f"bench {r['client_ms']:.4f}; "
                      f"{r['xacts']:.3f} transactions/job", flush=True)
    print()
    print("| scenario | one database | two pools on two clusters | change | Tenax CPU µs/job 1 / 2 | PostgreSQL CPU µs/job 1 / 2 (of which cluster B) | transactions/job 1 / 2 |")
    print("|---|---:|---:|---:|---|---|---|")
    for scenario in SCENARIOS:
        med = {}
        for pools in (1, 2):
            runs = results[(scenario, pools)]
            med[pools] = {k: statistics.median(r[k] for r in runs) for k in ("rate", "tenax_ms", "pg_ms", "pg_b_ms", "xacts")}
        change = 100 * (med[2]["rate"] / med[1]["rate"] - 1)
        print(f"| `{scenario}` | {med[1]['rate']:.0f} | {med[2]['rate']:.0f} | {change:+.1f} % | "
              f"{1000 * med[1]['tenax_ms']:.1f} / {1000 * med[2]['tenax_ms']:.1f} | "
              f"{1000 * med[1]['pg_ms']:.1f} / {1000 * med[2]['pg_ms']:.1f} "
              f"({1000 * med[2]['pg_b_ms']:.1f}) | "
              f"{med[1]['xacts']:.3f} / {med[2]['xacts']:.3f} |")


if __name__ == "__main__":
    main()
