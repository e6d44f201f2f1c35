#!/usr/bin/env python3
"""What a job costs PostgreSQL: Tenax builds side by side, and graphile-worker (issue 31).

Run under a throwaway cluster, with release builds, under the CPU lock:

    flock /tmp/tenax-cpu.lock tests/postgres/with-cluster.sh \
        python3 tests/postgres/pg-cost.py ROUNDS BIN [BIN ...]

For each round, each scenario, each binary (their order reversed every other round): a fresh
database, a fresh `tenax serve --database-url` on it, and `tenax bench --scenario S --json`.
Measured around the bench: the jobs per second it reports, the CPU of PostgreSQL (its
postmaster and every process under it, those that ended meanwhile included: the postmaster's
reaped children's time), the Tenax server's CPU, and the WAL written, each per job. For
`take-complete` the CPU is also taken over the drain alone (the scenario's last `seconds`,
after its fill), from samples every 50 ms.

With GRAPHILE_DIR set to a directory where `npm install graphile-worker@0.17.3` was run,
each round also runs graphile-worker's side (tests/postgres/graphile-bench.js) on a fresh
database of the same cluster: the drain of a pre-enqueued backlog with a no-op task, producers
and consumers at once, `addJobs` of 1000, and one `addJob` per call on 8 lanes; PostgreSQL's
CPU over the same phases. Prints each run as a JSON line, then the medians.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PG = os.environ["TENAX_PG_URL"].rsplit("/", 1)[0]
ROUNDS = int(sys.argv[1])
BINS = [os.path.abspath(b) for b in sys.argv[2:]]
GRAPHILE = os.environ.get("GRAPHILE_DIR")
# PG_COST_SCENARIOS=name:jobs,... chooses others (a quick check: mixed:20000).
SCENARIOS = [(s.split(":")[0], int(s.split(":")[1])) for s in os.environ.get(
    "PG_COST_SCENARIOS", "take-complete:200000,mixed:200000,bulk-1000:200000,enqueue-8:20000"
).split(",")]
# graphile-bench.js's name for each scenario.
GRAPHILE_NAMES = {"take-complete": "drain", "mixed": "mixed", "bulk-1000": "bulk-1000",
                  "enqueue-8": "enqueue-8"}
TICK = os.sysconf("SC_CLK_TCK")
PORT = 7957


def psql(sql, db="postgres"):
    return subprocess.run(["psql", f"{PG}/{db}", "-qAtX", "-c", sql], check=True,
                          capture_output=True, text=True).stdout.strip()


def ticks(pid, children=False):
    """utime + stime of `pid` (and of its reaped children), in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0
    own = int(fields[11]) + int(fields[12])
    return own + (int(fields[13]) + int(fields[14]) if children else 0)


def postmaster():
    backend = int(psql("SELECT pg_backend_pid()"))
    with open(f"/proc/{backend}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("PPid:"))


POSTMASTER = postmaster()


def pg_ticks():
    """PostgreSQL's CPU so far: the postmaster, its live children, and those it reaped."""
    total = ticks(POSTMASTER, children=True)
    with open(f"/proc/{POSTMASTER}/task/{POSTMASTER}/children") as f:
        for pid in f.read().split():
            total += ticks(int(pid))
    return total


def wal_lsn():
    return psql("SELECT pg_current_wal_lsn()")


def wal_since(lsn):
    return int(psql(f"SELECT pg_current_wal_lsn() - '{lsn}'::pg_lsn"))


def fresh_database(prefix):
    name = f"{prefix}_{int(time.time() * 1000) % 10**9}"
    psql(f"CREATE DATABASE {name}")
    return name


def tenax_run(binary, scenario, jobs):
    db = fresh_database("cost")
    data = tempfile.mkdtemp(prefix="tenax-cost-")
    with open(f"{data}/log", "w") as log:
        server = subprocess.Popen(
            [binary, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", data,
             "--database-url", f"{PG}/{db}", "--log-requests", "false"],
            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    samples, done = [], threading.Event()

    def sample():
        while not done.is_set():
            samples.append((time.monotonic(), pg_ticks(), ticks(server.pid)))
            time.sleep(0.05)

    lsn = wal_lsn()
    sampler = threading.Thread(target=sample)
    sampler.start()
    time.sleep(0.1)
    out = subprocess.run(
        [binary, "bench", "--url", f"http://127.0.0.1:{PORT}", "--scenario", scenario,
         "--jobs", str(jobs), "--max-seconds", "60", "--json"],
        capture_output=True, text=True, check=True)
    ended = time.monotonic()
    time.sleep(0.1)
    done.set()
    sampler.join()
    report = json.loads(out.stdout)["scenarios"][0]
    n = report["jobs"]
    first, last = samples[0], samples[-1]
    if scenario == "take-complete":
        start = ended - report["seconds"]
        first = min(samples, key=lambda s: abs(s[0] - start))
    run = {"binary": binary, "scenario": scenario, "jobs": n,
           "jobs_per_sec": round(report["jobs_per_sec"]),
           "pg_us_per_job": round((last[1] - first[1]) * 1e6 / TICK / n, 1),
           "tenax_us_per_job": round((last[2] - first[2]) * 1e6 / TICK / n, 1),
           "wal_bytes_per_job": round(wal_since(lsn) / n)}
    server.terminate()
    server.wait()
    shutil.rmtree(data)
    psql(f"DROP DATABASE {db} WITH (FORCE)")
    return run


def graphile_run(scenario, jobs):
    name = GRAPHILE_NAMES[scenario]
    db = fresh_database("graphile")
    url = f"{PG}/{db}"
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "graphile-bench.js")
    env = dict(os.environ, NODE_PATH=os.path.join(GRAPHILE, "node_modules"))
    subprocess.run(["node", script, url, "migrate", "0"], env=env, check=True,
                   capture_output=True)
    bench = subprocess.Popen(["node", script, url, name, str(jobs)], env=env,
                             stdout=subprocess.PIPE, text=True)
    start, worker, lsn, result = pg_ticks(), ticks(bench.pid), wal_lsn(), None
    for line in bench.stdout:
        if not line.startswith('{"'):
            continue  # graphile-worker's own log lines
        message = json.loads(line)
        if message.get("filled"):  # the drain starts now
            start, worker, lsn = pg_ticks(), ticks(bench.pid), wal_lsn()
        else:
            result = message
            end, worker_end = pg_ticks(), ticks(bench.pid)
    bench.wait()
    n = result["jobs"]
    run = {"binary": "graphile-worker", "scenario": scenario, "jobs": n,
           "jobs_per_sec": round(result["jobs_per_sec"]),
           "pg_us_per_job": round((end - start) * 1e6 / TICK / n, 1),
           "tenax_us_per_job": round((worker_end - worker) * 1e6 / TICK / n, 1),
           "wal_bytes_per_job": round(wal_since(lsn) / n)}
    psql(f"DROP DATABASE {db} WITH (FORCE)")
    return run


runs = []
for round_ in range(ROUNDS):
    order = BINS if round_ % 2 == 0 else list(reversed(BINS))
    for scenario, jobs in SCENARIOS:
        for binary in order:
            runs.append(tenax_run(binary, scenario, jobs))
            print(json.dumps(runs[-1]), flush=True)
        if GRAPHILE:
            runs.append(graphile_run(scenario, jobs))
            print(json.dumps(runs[-1]), flush=True)

print("\nmedians (jobs/s; PostgreSQL µs/job; Tenax's or the worker's µs/job; WAL bytes/job):")
for scenario, _ in SCENARIOS:
    for binary in BINS + (["graphile-worker"] if GRAPHILE else []):
        mine = [r for r in runs if r["scenario"] == scenario and r["binary"] == binary]
        medians = [statistics.median(r[k] for r in mine) for k in
                   ("jobs_per_sec", "pg_us_per_job", "tenax_us_per_job", "wal_bytes_per_job")]
        print(f"{scenario:14} {binary:40} " + "  ".join(f"{m:>10}" for m in medians))
