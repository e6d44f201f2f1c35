#!/usr/bin/env python3
"""The checker of the fault harness: reads a run's history (every operation the clients invoked,
with its outcome and times, every fault, every request the webhook receiver got) and its final
state, and checks each promise of docs/guarantees.md against them. It shares no code with the
server, and none with the harness but the file formats (`harness/history.py`).

    tests/faults/checker.py DIR        # DIR/history.jsonl and DIR/final.json

It prints the operations by kind, the faults by kind, a table of the promises with the
violations of each (and the operations that show them), and how long faults took to heal.
Exit status 1 when any promise is violated.

Times. The clients' times (`t0`, `t1`) are the true time (they run on the machine's clock);
the servers' times (lease ends, creation times) are each node's, which decides on PostgreSQL's
clock. A check that compares the two allows `EPSILON` (the stated bound on that error). An
operation whose outcome is unknown (a timeout, a 5xx) may or may not have taken effect: no
check counts it as done, and none counts it as not done."""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from datetime import datetime
from typing import Any

# The most a server's time may differ from the true time in a check (clock error, and the
# moments a request spends between the client and the server).
EPSILON = 1.0
# How long a server's share of a cluster-wide limit may be stale after a server joins or
# leaves (docs/postgres.md, "Limits across servers"), plus a second of margin.
MEMBERSHIP_S = 6.0


def ts(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Report:
    def __init__(self) -> None:
        self.rows: list[tuple[str, int, list[str]]] = []

    def add(self, promise: str, checked: int, violations: list[str]) -> None:
        self.rows.append((promise, checked, violations))

    @property
    def violated(self) -> bool:
        return any(v for _, _, v in self.rows)

    def print(self) -> None:
        width = max(len(p) for p, _, _ in self.rows)
        print(f"{'promise':<{width}}  {'checked':>8}  violations")
        print("-" * (width + 22))
        for promise, checked, violations in self.rows:
            print(f"{promise:<{width}}  {checked:>8}  {len(violations)}")
        for promise, _, violations in self.rows:
            for v in violations[:10]:
                print(f"  ✗ {promise}: {v}")
            if len(violations) > 10:
                print(f"  … and {len(violations) - 10} more")


def load(directory: str) -> tuple[list[dict], dict]:
    with open(f"{directory}/history.jsonl") as f:
        history = [json.loads(line) for line in f if line.strip()]
    with open(f"{directory}/final.json") as f:
        final = json.load(f)
    return history, final


# --- the promises -------------------------------------------------------------------------------


def check_enqueues(ops: list[dict], final: dict, report: Report) -> None:
    """An acknowledged enqueue is never lost (either API)."""
    jobs = {j["id"]: j for q in final["jobs"].values() for j in q}
    deleted = {o["value"]["message"] for o in ops
               if o["f"] == "zaqar-delete" and o["ok"] is not False}
    lost, checked = [], 0
    for o in ops:
        if o["ok"] is not True:
            continue
        if o["f"] == "enqueue":
            ids = [o["value"]["id"]]
        elif o["f"] in ("enqueue-batch", "enqueue-workflow", "batch-create"):
            ids = o["value"]["ids"]
        elif o["f"] == "zaqar-post":
            ids = [o["value"]["id"]]
        else:
            continue
        for i in ids:
            checked += 1
            if i not in jobs and not (o["f"] == "zaqar-post" and i in deleted):
                lost.append(f"{o['f']} by {o['process']} at {o['t1']:.3f} acknowledged job "
                            f"{i}, which is not in the store")
    report.add("acknowledged enqueues are never lost", checked, lost)


def check_unique_keys(final: dict, report: Report) -> None:
    """An enqueue with a unique key never makes two unfinished jobs with that key: one key's
    jobs follow each other, each made after the one before it finished."""
    by_key: dict[str, list[dict]] = defaultdict(list)
    for job in final["jobs"]["uniq"]:
        if job.get("unique_key"):
            by_key[job["unique_key"]].append(job)
    violations, checked = [], 0
    for key, jobs in by_key.items():
        jobs.sort(key=lambda j: j["id"])
        unfinished = [j["id"] for j in jobs if j["status"] not in ("completed", "dead")]
        if len(unfinished) > 1:
            violations.append(f"key {key}: jobs {unfinished} are all unfinished")
        for before, after in zip(jobs, jobs[1:]):
            checked += 1
            finished = ts(before.get("finished_at"))
            created = ts(after["created_at"])
            if finished is None or created is None or created < finished - EPSILON:
                violations.append(
                    f"key {key}: job {after['id']} made at {after['created_at']} while job "
                    f"{before['id']} was unfinished (finished {before.get('finished_at')})")
    report.add("a unique key never has two unfinished jobs", checked, violations)


def leases(ops: list[dict], setup: dict) -> dict[int, list[dict]]:
    """Every lease a take certainly handed out, by job, in order, with what became of it: its
    token, when the take was invoked and answered, its end by the server's time (after every
    heartbeat), and the acknowledgements that named its token."""
    by_job: dict[int, list[dict]] = defaultdict(list)
    by_token: dict[tuple[int, int], dict] = {}
    for o in ops:
        if o["f"] == "take" and o["ok"] is True:
            for job in o["value"]["jobs"]:
                lease = {"job": job["id"], "queue": job["queue"], "token": job["lease_token"],
                         "attempt": job["attempt"],
                         "t0": o["t0"], "t1": o["t1"], "process": o["process"],
                         "end": ts(job["lease_expires_at"]), "acks": []}
                by_job[job["id"]].append(lease)
                by_token[(job["id"], job["lease_token"])] = lease
    for o in ops:
        if o["f"] in ("complete", "fail", "heartbeat"):
            lease = by_token.get((o["value"]["id"], o["value"]["lease_token"]))
            if lease is not None:
                lease["acks"].append(o)
    for held in by_job.values():
        # In the server's order: each take of a job counts one more attempt. The order the
        # answers arrived in is not it: a take whose commit was acknowledged late (a lossy
        # link to the database) can be answered after a later take of the same job, with a
        # lease that had already ended.
        held.sort(key=lambda lease: (lease["attempt"], lease["t1"]))
        for lease in held:
            lease["acks"].sort(key=lambda o: o["t0"])
            # The end as the take set it; `end` after every heartbeat the server accepted.
            lease["first_end"] = lease["end"]
            for ack in lease["acks"]:
                if ack["f"] == "heartbeat" and ack["ok"] is True:
                    lease["end"] = max(lease["end"], ts(ack["value"]["lease_expires_at"]))
    return by_job


def released_at(lease: dict) -> float | None:
    """The earliest moment the lease's own completion or failure may have ended it."""
    ends = [a["t0"] for a in lease["acks"] if a["f"] in ("complete", "fail") and a["ok"] is not False]
    return min(ends) if ends else None


def check_leases(by_job: dict[int, list[dict]], final: dict, report: Report) -> None:
    exclusive, refused, undone = [], [], []
    late_accepted = []
    pairs = 0
    acks = 0
    jobs = {j["id"]: j for q in final["jobs"].values() for j in q}
    for job, held in by_job.items():
        for a, b in zip(held, held[1:]):
            pairs += 1
            # B took the job while A still held it: before A's end and before A let go.
            a_end = a["end"] - EPSILON
            let_go = released_at(a)
            if let_go is not None:
                a_end = min(a_end, let_go)
            if b["attempt"] <= a["attempt"]:
                exclusive.append(
                    f"job {job}: {a['process']} (token {a['token']}) and {b['process']} (token "
                    f"{b['token']}) were both handed attempt {b['attempt']}")
            elif b["t1"] < a_end:
                exclusive.append(
                    f"job {job}: leased to {a['process']} (token {a['token']}, until "
                    f"{a['end']:.3f}) and to {b['process']} (token {b['token']}) at {b['t1']:.3f}")
            # An acknowledgement with A's token, sent after B held the job, was accepted.
            for ack in a["acks"]:
                if ack["ok"] is True and ack["t0"] > b["t1"]:
                    refused.append(
                        f"job {job}: {ack['f']} by {ack['process']} with token {a['token']} at "
                        f"{ack['t0']:.3f} accepted, though {b['process']} took the job at "
                        f"{b['t1']:.3f}")
        for lease in held:
            # In the order they were sent: each is judged by the end the lease had then.
            end = lease["first_end"]
            for ack in lease["acks"]:
                acks += 1
                if ack["ok"] is True and ack["t0"] > end + EPSILON:
                    late_accepted.append(
                        f"job {job}: {ack['f']} by {ack['process']} at {ack['t0']:.3f} accepted, "
                        f"its lease having ended at {end:.3f}")
                if ack["f"] == "heartbeat" and ack["ok"] is True:
                    end = max(end, ts(ack["value"]["lease_expires_at"]))
        completes = [a for lease in held for a in lease["acks"]
                     if a["f"] == "complete" and a["ok"] is True]
        if completes:
            done = min(c["t1"] for c in completes)
            for lease in held:
                if lease["t0"] > done:
                    undone.append(f"job {job}: completed at {done:.3f}, taken again by "
                                  f"{lease['process']} at {lease['t1']:.3f}")
            status = jobs.get(job, {}).get("status")
            if status != "completed":
                undone.append(f"job {job}: its completion was acknowledged; it is {status}")
    report.add("a job is leased to one worker at a time", pairs, exclusive)
    report.add("an acknowledgement of a lease taken over is refused", pairs, refused)
    report.add("an acknowledgement after its lease ended is refused", acks, late_accepted)
    report.add("an acknowledged completion is never undone", len(by_job), undone)


def check_finished(final: dict, setup: dict, drained: bool, report: Report) -> None:
    stuck = []
    checked = 0
    for queue in setup["work_queues"]:
        for job in final["jobs"][queue]:
            checked += 1
            if job["status"] not in ("completed", "dead", "cancelled"):
                stuck.append(f"job {job['id']} ({queue}) is {job['status']}")
    if not drained:
        stuck.insert(0, "the jobs stopped draining: nothing was done for 60 s")
    report.add("every job ends completed or dead", checked, stuck)


def check_workflows(ops: list[dict], by_job: dict[int, list[dict]], final: dict,
                    report: Report) -> None:
    """A job that waits for others is never handed out before each of them completed: every
    take of it was answered after a completion of each parent was asked for (an acknowledged
    or unknown one: a refused one did not happen). At the end, a waiting job whose parent did
    not complete did not run and ended with a reason naming that; one that ran has every
    parent completed."""
    jobs = {j["id"]: j for q in final["jobs"].values() for j in q}
    completions: dict[int, float] = {}
    for o in ops:
        if o["f"] == "complete" and o["ok"] is not False:
            job = o["value"]["id"]
            completions[job] = min(completions.get(job, o["t0"]), o["t0"])
    early, ended, checked = [], [], 0
    for o in ops:
        if o["f"] != "enqueue-workflow" or o["ok"] is not True:
            continue
        ids = o["value"]["ids"]
        for child, parents in zip(ids, o["value"]["parents"]):
            for lease in by_job.get(child, []):
                for p in parents:
                    checked += 1
                    parent = ids[p]
                    asked = completions.get(parent)
                    if asked is None or lease["t1"] < asked:
                        early.append(
                            f"job {child} was taken by {lease['process']} (answered at "
                            f"{lease['t1']:.3f}) before its parent {parent}'s completion was "
                            f"asked for ({'never' if asked is None else f'{asked:.3f}'})")
            state = jobs.get(child)
            if state is None or not parents:
                continue
            lost = [ids[p] for p in parents
                    if (jobs.get(ids[p]) or {}).get("status") != "completed"]
            if state["status"] == "completed" and lost:
                ended.append(f"job {child} completed though its parents {lost} did not")
            if lost and state["status"] not in ("dead", "cancelled"):
                ended.append(f"job {child} is {state['status']} though its parents {lost} "
                             f"did not complete")
            if lost and by_job.get(child) and all(
                    (jobs.get(ids[p]) or {}).get("status") in ("dead", "cancelled")
                    for p in lost):
                ended.append(f"job {child} was taken though its parents {lost} died")
    report.add("a job waiting for others runs only after they completed", checked, early)
    report.add("a workflow's jobs end as their parents allow", checked, ended)


def check_callbacks(ops: list[dict], final: dict, report: Report) -> None:
    """Each batch's `on_complete` callback is enqueued exactly once once its members have all
    finished (and at most once for a batch whose creation's outcome is unknown); a callback
    names a batch that was made."""
    callbacks: dict[int, list[int]] = defaultdict(list)
    for job in final["jobs"].get("cb", []):
        batch = (job.get("payload") or {}).get("batch") or {}
        callbacks[batch.get("id")].append(job["id"])
    jobs = {j["id"]: j for q in final["jobs"].values() for j in q}
    made = {o["value"]["batch"]: o for o in ops
            if o["f"] == "batch-create" and o["ok"] is True}
    violations, checked = [], 0
    for batch, o in made.items():
        checked += 1
        members = [jobs.get(i) for i in o["value"]["ids"]]
        finished = all(m is not None and m["status"] in ("completed", "dead", "cancelled")
                       for m in members)
        got = callbacks.get(batch, [])
        if len(got) > 1:
            violations.append(f"batch {batch}: {len(got)} callbacks ({got})")
        elif finished and not got:
            violations.append(f"batch {batch}: every member finished, and no callback")
        elif not finished and got:
            violations.append(f"batch {batch}: a callback ({got}) before every member finished")
    for batch, got in callbacks.items():
        if len(got) > 1 and batch not in made:
            violations.append(f"batch {batch} (made with an unknown outcome): {len(got)} callbacks")
    report.add("a batch's callback is enqueued exactly once", checked, violations)


def max_overlap(intervals: list[tuple[float, float]]) -> tuple[int, float]:
    events = sorted([(s, 1) for s, e in intervals if e > s] + [(e, -1) for s, e in intervals if e > s])
    now, most, at = 0, 0, 0.0
    for t, d in events:
        now += d
        if now > most:
            most, at = now, t
    return most, at


def check_concurrency(by_job: dict[int, list[dict]], setup: dict, report: Report) -> None:
    """A queue's concurrency limit is never exceeded: leases counted from the latest moment
    they may have begun to the earliest they may have ended."""
    intervals = []
    for held in by_job.values():
        for lease in held:
            if lease["queue"] != "limited":
                continue
            end = lease["end"] - EPSILON
            let_go = released_at(lease)
            if let_go is not None:
                end = min(end, let_go)
            intervals.append((lease["t1"], end))
    most, at = max_overlap(intervals)
    limit = setup["concurrency_limit"]
    violations = [] if most <= limit else [f"{most} leases of queue limited at {at:.3f} "
                                          f"(limit {limit})"]
    report.add("a queue's concurrency limit holds", len(intervals), violations)


def check_rate(by_job: dict[int, list[dict]], setup: dict, report: Report) -> None:
    """A queue's rate limit holds: takes that certainly fell within one period, at most the
    limit, with a period stretched by EPSILON for the servers' clocks."""
    takes = sorted((lease["t0"], lease["t1"]) for held in by_job.values() for lease in held
                   if lease["queue"] == "rated")
    period = setup["rate_period_s"]
    limit = setup["rate_limit"]
    violations = []
    for start, _ in takes:
        inside = [t for t in takes if t[0] >= start and t[1] <= start + period - EPSILON]
        if len(inside) > limit:
            violations.append(f"{len(inside)} takes of queue rated between {start:.3f} and "
                              f"{start + period - EPSILON:.3f} (limit {limit} a period)")
    report.add("a queue's rate limit holds", len(takes), violations[:1] if violations else [])


def check_schedule(final: dict, report: Report) -> None:
    ticks: dict[str, list[int]] = defaultdict(list)
    for job in final["jobs"]["ticks"]:
        ticks[job["run_at"]].append(job["id"])
    violations = [f"tick {t}: {len(ids)} jobs {ids}" for t, ids in ticks.items() if len(ids) > 1]
    counts = final["schedule"].get("counts", {})
    if counts.get("enqueued") is not None and counts["enqueued"] != len(final["jobs"]["ticks"]):
        violations.append(f"the schedule counts {counts['enqueued']} jobs enqueued; the queue "
                          f"has {len(final['jobs']['ticks'])}")
    report.add("each schedule tick enqueues one job", len(ticks), violations)


def check_webhooks(ops: list[dict], deliveries_seen: list[dict], final: dict,
                   report: Report) -> None:
    """Each acknowledged message of the hooked queue is delivered to the subscription (the
    receiver answered 200 to a request of its delivery) or its delivery is dead with its
    attempts counted."""
    by_message = {d["message_id"]: d for d in final["deliveries"]}
    delivered = {d["delivery"] for d in deliveries_seen if d["status"] == 200}
    violations, checked = [], 0
    for o in ops:
        if o["f"] == "enqueue" and o["ok"] is True and o["value"]["queue"] == "hooks":
            checked += 1
            message = o["value"]["id"]
            d = by_message.get(message)
            if d is None:
                violations.append(f"message {message}: no delivery")
            elif d["status"] == "completed" and d["id"] not in delivered:
                violations.append(f"message {message}: delivery {d['id']} completed, but the "
                                  "receiver never answered 200 to it")
            elif d["status"] == "dead" and not d.get("failures"):
                violations.append(f"message {message}: delivery {d['id']} dead without attempts")
            elif d["status"] not in ("completed", "dead"):
                violations.append(f"message {message}: delivery {d['id']} is {d['status']}")
    report.add("each webhook message is delivered or dead", checked, violations)


def check_endpoint_limits(deliveries_seen: list[dict], faults: list[dict], setup: dict,
                          servers: int, report: Report) -> None:
    """The subscription's max_concurrency and throttle hold across the servers within the
    stated tolerance (limit + servers - 1), except for MEMBERSHIP_S after a server came or went."""
    churn = [(f["t0"] - 1, f["t1"] + MEMBERSHIP_S) for f in faults
             if f["f"] in ("kill", "pause", "partition-pg", "partition-pg-oneway", "loss-pg")]
    calm = [d for d in deliveries_seen
            if not any(a <= d["t0"] <= b for a, b in churn)]
    allowed = setup["max_concurrency"] + servers - 1
    violations = []
    busiest = max((d["concurrent"] for d in calm), default=0)
    if busiest > allowed:
        violations.append(f"{busiest} requests at once (allowed {allowed})")
    starts = sorted(d["t0"] for d in calm)
    per_second = setup["throttle_per_second"] + servers - 1
    most = 0
    j = 0
    for i, start in enumerate(starts):
        while starts[j] < start - 1.0:
            j += 1
        most = max(most, i - j + 1)
    # A second counted on the receiver's clock spans parts of two of a server's seconds.
    if most > per_second * 2:
        violations.append(f"{most} requests started within one second (allowed {per_second})")
    report.add("a subscription's concurrency and throttle hold", len(calm), violations)


def check_zaqar(ops: list[dict], final: dict, report: Report) -> None:
    claims: dict[int, list[dict]] = defaultdict(list)
    releases = {o["value"]["claim"]: o for o in ops
                if o["f"] == "zaqar-release" and o["ok"] is not False}
    deletes: dict[int, dict] = {}
    for o in ops:
        if o["f"] == "zaqar-delete" and o["ok"] is True:
            deletes.setdefault(o["value"]["message"], o)
    for o in ops:
        if o["f"] == "zaqar-claim" and o["ok"] is True:
            for m in o["value"]["messages"]:
                claims[m].append(o)
    twice, returned = [], []
    checked = 0
    for message, held in claims.items():
        held.sort(key=lambda o: o["t1"])
        for a, b in zip(held, held[1:]):
            checked += 1
            # The claim was made at the earliest when it was asked for: it may end that early.
            end = a["t0"] + a["value"]["ttl"] - EPSILON
            release = releases.get(a["value"]["claim"])
            if release is not None:
                end = min(end, release["t0"])
            deleted = deletes.get(message)
            if deleted is not None:
                end = min(end, deleted["t0"])
            if b["t1"] < end:
                twice.append(f"message {message}: claimed by {a['value']['claim']} at "
                             f"{a['t1']:.3f} and by {b['value']['claim']} at {b['t1']:.3f}")
        deleted = deletes.get(message)
        if deleted is not None:
            for c in held:
                if c["t0"] > deleted["t1"]:
                    returned.append(f"message {message}: deleted at {deleted['t1']:.3f}, "
                                    f"claimed again at {c['t1']:.3f}")
    listed = set(final["zaqar_messages"])
    for message, d in deletes.items():
        if message in listed:
            returned.append(f"message {message}: deleted at {d['t1']:.3f}, listed at the end")
    report.add("a Zaqar message is in one live claim at a time", checked, twice)
    report.add("a deleted Zaqar message never returns", len(deletes), returned)


# --- healing -------------------------------------------------------------------------------------


def leader_at(taken: list[tuple[float, str]], t: float) -> str | None:
    before = [node for at, node in taken if at <= t]
    return before[-1] if before else None


def healing(history: list[dict], final: dict, by_job: dict[int, list[dict]]) -> list[str]:
    """How long faults took to heal: a node taking writes again (probed after each fault),
    another node taking the lead from a paused or partitioned leader, a lease that ended
    without its worker being taken again."""
    lines = []
    by_kind: dict[str, list[float]] = defaultdict(list)
    for r in history:
        if r["kind"] == "recovery":
            by_kind[r["fault"]].append(r["t1"] - r["t0"])
    for kind, waits in sorted(by_kind.items()):
        lines.append(f"{kind:<22} writes again {statistics.median(waits):6.2f} s after healing "
                     f"(median of {len(waits)}, at most {max(waits):.2f} s)")
    taken = sorted((ts(t["at"]), t["node"]) for t in final.get("leadership", []))
    # A fault on the leader: another node leads after some seconds, or the fault heals first
    # (a silent leader is replaced once it has not been seen for 5 s).
    healed_at = {(f["f"], f["value"].get("node"), f["t0"]): f["t1"] for f in history
                 if f["kind"] == "fault" and f["value"].get("healed")}
    takeovers: dict[str, list[str]] = defaultdict(list)
    for f in history:
        if f["kind"] != "fault" or f["value"].get("healed") or f["f"] not in (
                "pause", "partition-pg", "partition-pg-oneway", "kill"):
            continue
        node = f["value"].get("node")
        if leader_at(taken, f["t0"]) != node:
            continue
        healed = healed_at.get((f["f"], node, f["t0"]), float("inf"))
        after = next((at for at, n in taken if at > f["t0"] and n != node), None)
        if after is not None and after <= healed:
            takeovers[f["f"]].append(f"{after - f['t0']:.2f} s")
        else:
            takeovers[f["f"]].append(f"kept ({healed - f['t0']:.1f} s fault)")
    for kind, shown in sorted(takeovers.items()):
        lines.append(f"{kind:<22} of the leader: another node led after {', '.join(shown)}")
    returned = []
    for held in by_job.values():
        for a, b in zip(held, held[1:]):
            if released_at(a) is None and b["t1"] > a["end"]:
                returned.append(b["t1"] - a["end"])
    if returned:
        returned.sort()
        lines.append(f"{'lease ended':<22} taken again {statistics.median(returned):6.2f} s "
                     f"after its end (median of {len(returned)}, p95 "
                     f"{returned[int(len(returned) * 0.95)]:.2f} s, at most {returned[-1]:.2f} s)")
    return lines


def main(directory: str) -> int:
    history, final = load(directory)
    ops = [r for r in history if r["kind"] == "op"]
    faults = [r for r in history if r["kind"] == "fault"]
    seen = [r for r in history if r["kind"] == "delivery"]
    setup = next(r["value"] for r in history if r["kind"] == "setup")
    drained = any(r["kind"] == "drained" and r["value"]["seconds"] >= 0 for r in history)

    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for o in ops:
        counts[o["f"]][0 if o["ok"] is True else 1 if o["ok"] is False else 2] += 1
    print(f"seed {final.get('seed')}, {final.get('minutes')} min: {len(ops)} operations, "
          f"{len(seen)} webhook requests received")
    print(f"{'operation':<16} {'ok':>8} {'refused':>8} {'unknown':>8}")
    for f, (a, b, c) in sorted(counts.items()):
        print(f"{f:<16} {a:>8} {b:>8} {c:>8}")
    injected = defaultdict(int)
    for f in faults:
        if not f["value"].get("healed"):
            injected[f["f"]] += 1
    print("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(injected.items())))
    print()

    by_job = leases(ops, setup)
    report = Report()
    check_enqueues(ops, final, report)
    check_unique_keys(final, report)
    check_leases(by_job, final, report)
    check_finished(final, setup, drained, report)
    check_workflows(ops, by_job, final, report)
    check_callbacks(ops, final, report)
    check_concurrency(by_job, setup, report)
    check_rate(by_job, setup, report)
    check_schedule(final, report)
    check_webhooks(ops, seen, final, report)
    check_endpoint_limits(seen, faults, setup, 3, report)
    check_zaqar(ops, final, report)
    report.print()
    print()
    for line in healing(history, final, by_job):
        print(line)
    return 1 if report.violated else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
