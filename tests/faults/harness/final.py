"""The final state, read once every fault is healed and the jobs are drained: every job of the
workload's queues (in every status), the subscription's deliveries, the schedule and its
ticks' jobs, and the Zaqar queue's messages; written beside the history for the checker."""

from __future__ import annotations

import time
from typing import Any

from .client import Client
from .workload import ZAQAR_HEADERS, ZAQAR_QUEUE, Setup, retry_forever

QUEUES = ["work", "uniq", "limited", "rated", "flow", "bwork", "cb", "hooks", "ticks",
          f"{'p'}:{ZAQAR_QUEUE}"]


def all_jobs(client: Client, queue: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    after = None
    while True:
        path = f"/api/jobs?queue={queue.replace(':', '%3A')}&limit=1000"
        if after is not None:
            path += f"&after={after}"
        page = retry_forever(client, "GET", path, None)
        jobs.extend(page["jobs"])
        after = page.get("next_after")
        if after is None:
            return jobs


def to_do(client: Client, setup: Setup) -> int:
    """How many jobs of the workload's queues, and deliveries, are still to do."""
    left = 0
    stats = retry_forever(client, "GET", "/api/stats", None)
    for queue in stats["queues"]:
        if queue["queue"] in setup.work_queues:
            left += (queue["scheduled"] + queue["ready"] + queue["in_flight"]
                     + queue.get("waiting", 0))
    sub = retry_forever(client, "GET", f"/api/subscriptions/{setup.subscription}", None)
    counts = sub.get("deliveries") or {}
    left += sum(counts.get(k) or 0 for k in ("scheduled", "ready", "in_flight"))
    return left


def wait_drained(client: Client, setup: Setup, stalled_after: float) -> float:
    """Waits until nothing is left to do, for as long as the work left keeps going down: a
    rate-limited backlog drains slowly but surely; a stall (nothing done for `stalled_after`
    seconds) is what the check must catch. Answers how long it took, or -1 on a stall."""
    began = time.monotonic()
    fewest, progressed = None, began
    while True:
        left = to_do(client, setup)
        if left == 0:
            return time.monotonic() - began
        now = time.monotonic()
        if fewest is None or left < fewest:
            fewest, progressed = left, now
        elif now - progressed > stalled_after:
            return -1.0
        time.sleep(0.5)


def read(client: Client, setup: Setup) -> dict[str, Any]:
    state: dict[str, Any] = {"jobs": {}, "t": time.time()}
    for queue in QUEUES:
        state["jobs"][queue] = all_jobs(client, queue)
    state["schedule"] = retry_forever(client, "GET", "/api/schedules/tick", None)
    deliveries = []
    after = None
    while True:
        path = f"/api/subscriptions/{setup.subscription}/deliveries?limit=1000"
        if after is not None:
            path += f"&after={after}"
        page = retry_forever(client, "GET", path, None)
        deliveries.extend(page["deliveries"])
        after = page.get("next_after")
        if after is None:
            break
    state["deliveries"] = deliveries
    state["subscription"] = retry_forever(
        client, "GET", f"/api/subscriptions/{setup.subscription}", None)
    messages = []
    marker = None
    while True:
        path = f"/v2/queues/{ZAQAR_QUEUE}/messages?include_claimed=true&limit=20"
        if marker:
            path += f"&marker={marker}"
        status, page = client.request("GET", path, None, ZAQAR_HEADERS)
        if status == 204 or not page or not page.get("messages"):
            break
        messages.extend(int(m["id"]) for m in page["messages"])
        nexts = [link["href"] for link in page.get("links", []) if link.get("rel") == "next"]
        if not nexts or "marker=" not in nexts[0]:
            break
        new_marker = nexts[0].split("marker=")[1].split("&")[0]
        if new_marker == marker:
            break
        marker = new_marker
    state["zaqar_messages"] = messages
    return state
