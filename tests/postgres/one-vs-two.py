#!/usr/bin/env python3
"""One Tenax server against two on the same database, at the same total concurrency.

Run under a throwaway cluster, with a release build, under the CPU lock:

    flock /tmp/tenax-cpu.lock tests/postgres/with-cluster.sh \
        python3 tests/postgres/one-vs-two.py target/release/tenax [ROUNDS] [SCENARIO,...]

For each round and scenario, in alternating order, on a fresh database and fresh servers:
one `tenax serve` driven by one `tenax bench` with the scenario's default connections (or
workers), and two servers each driven by its own `tenax bench` with half of them and half the
jobs, started together. The two-server total is all jobs over the longer of the two runs.
Alongside: the CPU seconds per 1000 jobs of the Tenax servers, of PostgreSQL (all its
processes) and of the bench clients, and PostgreSQL transactions per job
(pg_stat_database.xact_commit), and the database's active sessions waiting on a lock or a
lightweight lock (pg_stat_activity, sampled every 250 ms). Prints each run, then the medians.
"""

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

from cpu import children_cpu, cpu_of, postgres_pids, spent

PG = os.environ["TENAX_PG_URL"].rsplit("/", 1)[0]
TENAX = os.path.abspath(sys.argv[1])
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
# scenario -> (the flag that sets its concurrency, the default)
SCENARIOS = {
    "bulk-1000": ("--connections", 4),
    "take-complete": ("--workers", 4),
    "mixed": ("--workers", 4),
    "enqueue-8": ("--connections", 8),
}
if len(sys.argv) > 3:
    SCENARIOS = {name: SCENARIOS[name] for name in sys.argv[3].split(",")}
DEFAULT_JOBS = {"bulk-1000": 400_000, "take-complete": 200_000, "mixed": 200_000, "enqueue-8": 20_000}


def psql(db, sql):
    out = subprocess.run(
        ["psql", "-X", "-q", "-t", "-A", f"{PG}/{db}", "-c", sql],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def commits():
    return int(psql("postgres", "SELECT xact_commit FROM pg_stat_database WHERE datname = 'tenax_bench'") or 0)


def secrets_key_file():
    """The key file every server shares (required on PostgreSQL): $TENAX_SECRETS_KEY_FILE, or one
    made for this run."""
    path = os.environ.get("TENAX_SECRETS_KEY_FILE")
    if not path:
        path = f"/tmp/one-vs-two-{os.getpid()}.key"
        subprocess.run([TENAX, "secrets", "generate-key", path], check=True, stdout=subprocess.DEVNULL)
        os.environ["TENAX_SECRETS_KEY_FILE"] = path
    return path


def start_server(port, log):
    secrets_key_file()
    proc = subprocess.Popen(
        [TENAX, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", f"/tmp/one-vs-two-{port}",
         "--database-url", f"{PG}/tenax_bench"],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"),
    )
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the server on {port} did not start: see {log}")


def run(scenario, servers):
    flag, default = SCENARIOS[scenario]
    psql("postgres", "DROP DATABASE IF EXISTS tenax_bench")
    psql("postgres", "CREATE DATABASE tenax_bench")
    procs = [start_server(7991 + i, f"/tmp/one-vs-two-{7991 + i}.log") for i in range(servers)]
    time.sleep(1.5)  # every server has counted the others, and one leads
    share = default // servers
    jobs = DEFAULT_JOBS[scenario] // servers
    before = (cpu_of([p.pid for p in procs]), cpu_of(postgres_pids()), commits(), children_cpu())
    # What the database's sessions wait for, sampled every 250 ms by one psql of its own.
    waits = subprocess.Popen(
        ["psql", "-X", "-q", "-t", "-A", f"{PG}/postgres"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    waits.stdin.write(
        "SELECT 'sample' UNION ALL SELECT coalesce(wait_event_type, 'CPU') || ':' || "
        "coalesce(wait_event, '-') FROM pg_stat_activity WHERE datname = 'tenax_bench' "
        "AND state = 'active' AND backend_type = 'client backend';\n\\watch 0.25\n"
    )
    waits.stdin.flush()
    benches = [
        subprocess.Popen(
            [TENAX, "bench", "--url", f"http://127.0.0.1:{7991 + i}", "--scenario", scenario,
             flag, str(share), "--jobs", str(jobs), "--max-seconds", "60", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        for i in range(servers)
    ]
    reports = []
    for bench in benches:
        out, _ = bench.communicate()
        reports.append(json.loads(out)["scenarios"][0])
    after = (cpu_of([p.pid for p in procs]), cpu_of(postgres_pids()), commits(), children_cpu())
    waits.terminate()
    sampled, _ = waits.communicate()
    samples = max(1, sampled.splitlines().count("sample"))
    lock_waits = sum(1 for line in sampled.splitlines() if line.startswith(("Lock:", "LWLock:")))
    for proc in procs:
        proc.kill()
        proc.wait()
    done = sum(r["jobs"] for r in reports)
    seconds = max(r["seconds"] for r in reports)
    for r in reports:
        if r.get("error"):
            raise SystemExit(f"{scenario}: {r['error']}")
    return {
        "rate": done / seconds,
        "tenax_ms": 1000 * spent(before[0], after[0]) / done,
        "pg_ms": 1000 * spent(before[1], after[1]) / done,
        # Active sessions waiting on a lock or a lightweight lock, per sample.
        "lock_waits": lock_waits / samples,
        "xacts": (after[2] - before[2]) / done,
        # The benches (and a psql), reaped meanwhile.
        "client_ms": 1000 * (after[3] - before[3]) / done,
    }


def main():
    results = {}
    for round_ in range(1, ROUNDS + 1):
        for scenario in SCENARIOS:
            order = [1, 2] if round_ % 2 == 1 else [2, 1]
            for servers in order:
                r = run(scenario, servers)
                results.setdefault((scenario, servers), []).append(r)
                print(f"round {round_} {scenario} servers={servers}: {r['rate']:.0f} jobs/s, "
                      f"CPU ms/job: Tenax {r['tenax_ms']:.4f}, PostgreSQL {r['pg_ms']:.4f}, "
                      f"bench {r['client_ms']:.4f}; "
                      f"{r['xacts']:.3f} transactions/job, {r['lock_waits']:.2f} sessions waiting on locks",
                      flush=True)
    print()
    print("| scenario | one server | two servers (total) | change | Tenax CPU µs/job 1 / 2 | PostgreSQL CPU µs/job 1 / 2 | bench CPU µs/job 1 / 2 | transactions/job 1 / 2 | lock waits 1 / 2 |")
    print("|---|---:|---:|---:|---|---|---|---|---|")
    for scenario in SCENARIOS:
        med = {}
        for servers in (1, 2):
            runs = results[(scenario, servers)]
            med[servers] = {k: statistics.median(r[k] for r in runs) for k in ("rate", "tenax_ms", "pg_ms", "client_ms", "xacts", "lock_waits")}
        change = 100 * (med[2]["rate"] / med[1]["rate"] - 1)
        print(f"| `{scenario}` | {med[1]['rate']:.0f} | {med[2]['rate']:.0f} | {change:+.1f} % | "
              f"{1000 * med[1]['tenax_ms']:.1f} / {1000 * med[2]['tenax_ms']:.1f} | "
              f"{1000 * med[1]['pg_ms']:.1f} / {1000 * med[2]['pg_ms']:.1f} | "
              f"{1000 * med[1]['client_ms']:.1f} / {1000 * med[2]['client_ms']:.1f} | "
              f"{med[1]['xacts']:.3f} / {med[2]['xacts']:.3f} | "
              f"{med[1]['lock_waits']:.2f} / {med[2]['lock_waits']:.2f} |")


if __name__ == "__main__":
    main()
