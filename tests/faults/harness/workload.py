"""The workload: clients that use both APIs as applications do, each recording every operation
it invokes, with its outcome, in the history.

- producers enqueue jobs (one, a batch, with a unique key) into plain, limited and hooked
  queues, workflows (a batch whose jobs wait for each other: one, then three after it, then
  one after those), batches with a callback once their three jobs have finished, and post
  Zaqar messages;
- workers take (long polls), heartbeat, complete and fail jobs; some are slower than their
  lease, and some abandon a job;
- Zaqar claimers claim messages, delete most of them, and release some claims;
- a schedule ticks every second; a queue is held to a concurrency limit and one to a rate
  limit; a subscription of the hooked queue posts to the receiver, within a throttle and a
  concurrency bound.

The queues, limits and lease are `Setup`'s, so that the checker reads them from the history."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .client import Client, Unanswered, outcome
from .history import History

ZAQAR_PROJECT = "p"
ZAQAR_QUEUE = "zq"
ZAQAR_CLIENT_ID = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11"
ZAQAR_HEADERS = {"Client-ID": ZAQAR_CLIENT_ID, "X-Project-ID": ZAQAR_PROJECT}


@dataclass
class Setup:
    lease_s: float = 3.0
    concurrency_limit: int = 2
    rate_limit: int = 5
    rate_period_s: float = 1.0
    throttle_per_second: int = 20
    max_concurrency: int = 2
    work_queues: list[str] = field(
        default_factory=lambda: ["work", "uniq", "limited", "rated", "flow", "bwork", "cb"])
    subscription: int | None = None


def retry_forever(client: Client, method: str, path: str, body: Any,
                  headers: dict[str, str] | None = None, until: float | None = None) -> Any:
    """An administrative request made until it succeeds (the setup and the final reads)."""
    deadline = until or time.monotonic() + 120
    last: Any = None
    while time.monotonic() < deadline:
        try:
            status, answer = client.request(method, path, body, headers)
            if 200 <= status < 300:
                return answer
            last = (status, answer)
            if 400 <= status < 500 and status not in (408, 429):
                raise RuntimeError(f"{method} {path}: {status} {answer}")
        except Unanswered as error:
            last = error
        time.sleep(0.2)
    raise RuntimeError(f"{method} {path}: no success within its time: {last}")


def prepare(client: Client, setup: Setup, receiver_url: str, history: History) -> None:
    retry_forever(client, "PUT", "/api/queues/limited?create=true",
                  {"concurrency": setup.concurrency_limit})
    retry_forever(client, "PUT", "/api/queues/rated?create=true",
                  {"rate": {"limit": setup.rate_limit,
                            "period": f"{int(setup.rate_period_s * 1000)}ms"}})
    # Batch callbacks carry no policy of their own: their queue's retries them as fast as the
    # workload's jobs, or a callback failed a few times would wait past the drain's patience.
    retry_forever(client, "PUT", "/api/queues/cb?create=true",
                  {"policy": {"type": "fixed", "delay": "200ms", "retry_limit": 20}})
    made = retry_forever(client, "POST", "/api/queues/hooks/subscriptions", {
        "endpoint": receiver_url,
        "policy": {"type": "fixed", "delay": "300ms", "retry_limit": 40},
        "throttle_per_second": setup.throttle_per_second,
        "max_concurrency": setup.max_concurrency,
    })
    setup.subscription = made["id"]
    retry_forever(client, "PUT", "/api/schedules/tick", {
        "cron": "* * * * * *", "job": {"queue": "ticks", "type": "tick"}, "missed": "skip",
    })
    history.write({"kind": "setup", "t0": time.time(), "value": {
        "lease_s": setup.lease_s, "concurrency_limit": setup.concurrency_limit,
        "rate_limit": setup.rate_limit, "rate_period_s": setup.rate_period_s,
        "throttle_per_second": setup.throttle_per_second,
        "max_concurrency": setup.max_concurrency, "subscription": setup.subscription,
        "work_queues": setup.work_queues,
    }})


class Workload:
    def __init__(self, bases: list[str], history: History, setup: Setup, seed: int) -> None:
        self.bases = bases
        self.history = history
        self.setup = setup
        self.seed = seed
        self.producing = threading.Event()
        self.working = threading.Event()
        self.draining = threading.Event()
        self.threads: list[threading.Thread] = []
        self.counter = 0
        self.counter_lock = threading.Lock()
        # The rate-limited queue is fed at half its limit on average, in bursts of up to the
        # limit: faster, its backlog would grow for the whole run and never drain at the end.
        self.rated_tokens = float(setup.rate_limit)
        self.rated_at = time.monotonic()
        self.rated_lock = threading.Lock()

    def rated_allowed(self) -> bool:
        with self.rated_lock:
            now = time.monotonic()
            per_second = self.setup.rate_limit / self.setup.rate_period_s / 2
            self.rated_tokens = min(float(self.setup.rate_limit),
                                    self.rated_tokens + (now - self.rated_at) * per_second)
            self.rated_at = now
            if self.rated_tokens < 1:
                return False
            self.rated_tokens -= 1
            return True

    def next_n(self) -> int:
        with self.counter_lock:
            self.counter += 1
            return self.counter

    def start(self, producers: int, workers: int, claimers: int) -> None:
        self.producing.set()
        self.working.set()
        for i in range(producers):
            self._spawn(f"producer-{i}", self._producer)
        for i in range(workers):
            self._spawn(f"worker-{i}", self._worker)
        for i in range(claimers):
            self._spawn(f"claimer-{i}", self._claimer)

    def _spawn(self, name: str, target: Any) -> None:
        rng = random.Random(f"{self.seed}-{name}")
        thread = threading.Thread(target=target, args=(name, rng), name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def stop_producing(self) -> None:
        self.producing.clear()

    def drain(self) -> None:
        """From now on workers finish every job they take, at once."""
        self.draining.set()

    def stop(self) -> None:
        self.producing.clear()
        self.working.clear()
        for thread in self.threads:
            thread.join(timeout=30)

    # --- producers ---------------------------------------------------------------------------

    def _producer(self, name: str, rng: random.Random) -> None:
        client = Client(self.bases, rng)
        while self.producing.is_set():
            choice = rng.choices(
                ["one", "unique", "batch", "limited", "rated", "hooks", "zaqar", "workflow",
                 "callbacks"],
                weights=[4, 2, 1, 1, 1, 1, 2, 1, 1])[0]
            if choice == "rated" and not self.rated_allowed():
                choice = "one"
            try:
                if choice == "zaqar":
                    self._zaqar_post(name, client)
                elif choice == "batch":
                    self._batch(name, client)
                elif choice == "workflow":
                    self._workflow(name, client)
                elif choice == "callbacks":
                    self._callbacks(name, client)
                else:
                    self._enqueue(name, client, choice, rng)
            except Unanswered:
                pass
            time.sleep(rng.uniform(0.01, 0.05))
        client.close()

    def _enqueue(self, name: str, client: Client, choice: str, rng: random.Random) -> None:
        n = self.next_n()
        queue = {"one": "work", "unique": "uniq"}.get(choice, choice)
        job: dict[str, Any] = {"queue": queue, "type": "w", "payload": {"n": n},
                               "policy": {"type": "fixed", "delay": "200ms", "retry_limit": 20}}
        if choice == "unique":
            job["unique_key"] = f"k{rng.randrange(8)}"
        t0 = time.time()
        value: dict[str, Any] = {"queue": queue, "n": n, "node": client.base,
                                 "unique_key": job.get("unique_key")}
        try:
            status, answer = client.request("POST", "/api/jobs", job)
        except Unanswered as error:
            self.history.op(name, "enqueue", t0, None, {**value, "error": str(error)})
            raise
        if status in (200, 201):
            value.update(id=answer["id"], created=answer.get("created", True))
        else:
            value.update(status=status, error=answer)
        # A duplicate key is an answer too: nothing was made, and that is certain.
        self.history.op(name, "enqueue", t0, outcome(status), value)

    def _batch(self, name: str, client: Client) -> None:
        ns = [self.next_n() for _ in range(3)]
        jobs = [{"queue": "work", "type": "w", "payload": {"n": n},
                 "policy": {"type": "fixed", "delay": "200ms", "retry_limit": 20}} for n in ns]
        t0 = time.time()
        value: dict[str, Any] = {"queue": "work", "ns": ns, "node": client.base}
        try:
            status, answer = client.request("POST", "/api/jobs/batch", {"jobs": jobs})
        except Unanswered as error:
            self.history.op(name, "enqueue-batch", t0, None, {**value, "error": str(error)})
            raise
        if status == 201:
            value["ids"] = [j["id"] for j in answer["jobs"]]
        else:
            value.update(status=status, error=answer)
        self.history.op(name, "enqueue-batch", t0, outcome(status), value)

    # A workflow's shape: each job's parents, by index in the batch.
    WORKFLOW = [[], [0], [0], [0], [1, 2, 3]]

    def _workflow(self, name: str, client: Client) -> None:
        ns = [self.next_n() for _ in self.WORKFLOW]
        jobs = [{"queue": "flow", "type": "step", "payload": {"n": n},
                 "after": [{"index": p} for p in parents],
                 "policy": {"type": "fixed", "delay": "200ms", "retry_limit": 20}}
                for n, parents in zip(ns, self.WORKFLOW)]
        t0 = time.time()
        value: dict[str, Any] = {"queue": "flow", "ns": ns, "node": client.base,
                                 "parents": self.WORKFLOW}
        try:
            status, answer = client.request("POST", "/api/jobs/batch", {"jobs": jobs})
        except Unanswered as error:
            self.history.op(name, "enqueue-workflow", t0, None,
                            {**value, "error": str(error)})
            raise
        if status == 201:
            value["ids"] = [j["id"] for j in answer["jobs"]]
        else:
            value.update(status=status, error=answer)
        self.history.op(name, "enqueue-workflow", t0, outcome(status), value)

    def _callbacks(self, name: str, client: Client) -> None:
        """A batch of three jobs with an `on_complete` callback into queue `cb`."""
        ns = [self.next_n() for _ in range(3)]
        jobs = [{"queue": "bwork", "type": "member", "payload": {"n": n},
                 "policy": {"type": "fixed", "delay": "200ms", "retry_limit": 20}} for n in ns]
        t0 = time.time()
        value: dict[str, Any] = {"ns": ns, "node": client.base}
        try:
            status, answer = client.request("POST", "/api/batches", {
                "jobs": jobs,
                "on_complete": {"queue": "cb", "type": "callback", "payload": {"ns": ns}},
            })
        except Unanswered as error:
            self.history.op(name, "batch-create", t0, None, {**value, "error": str(error)})
            raise
        if status == 201:
            value["batch"] = answer["batch"]["id"]
            value["ids"] = [j["id"] for j in answer["jobs"]]
        else:
            value.update(status=status, error=answer)
        self.history.op(name, "batch-create", t0, outcome(status), value)

    def _zaqar_post(self, name: str, client: Client) -> None:
        n = self.next_n()
        t0 = time.time()
        value: dict[str, Any] = {"n": n, "node": client.base}
        try:
            status, answer = client.request(
                "POST", f"/v2/queues/{ZAQAR_QUEUE}/messages",
                {"messages": [{"body": {"n": n}, "ttl": 3600}]}, ZAQAR_HEADERS)
        except Unanswered as error:
            self.history.op(name, "zaqar-post", t0, None, {**value, "error": str(error)})
            raise
        if status == 201:
            value["id"] = int(answer["resources"][0].rsplit("/", 1)[1])
        else:
            value.update(status=status, error=answer)
        self.history.op(name, "zaqar-post", t0, outcome(status), value)

    # --- workers -----------------------------------------------------------------------------

    def _worker(self, name: str, rng: random.Random) -> None:
        client = Client(self.bases, rng)
        lease = f"{int(self.setup.lease_s * 1000)}ms"
        while self.working.is_set():
            t0 = time.time()
            value: dict[str, Any] = {"queues": self.setup.work_queues, "node": client.base}
            try:
                status, answer = client.request(
                    "POST", "/api/take",
                    {"queues": self.setup.work_queues, "max": 2, "lease": lease,
                     "wait": "1s"}, timeout=6)
            except Unanswered as error:
                self.history.op(name, "take", t0, None, {**value, "error": str(error)})
                time.sleep(0.1)
                continue
            if status != 200:
                self.history.op(name, "take", t0, outcome(status),
                                {**value, "status": status, "error": answer})
                time.sleep(0.1)
                continue
            jobs = [{"id": j["id"], "queue": j["queue"], "lease_token": j["lease_token"],
                     "lease_expires_at": j["lease_expires_at"], "attempt": j["attempt"]}
                    for j in answer["jobs"]]
            self.history.op(name, "take", t0, True, {**value, "jobs": jobs})
            for job in jobs:
                self._work(name, client, rng, job)
        client.close()

    def _ack(self, name: str, client: Client, f: str, job: dict[str, Any],
             body: dict[str, Any]) -> bool | None:
        t0 = time.time()
        value = {"id": job["id"], "queue": job["queue"], "lease_token": job["lease_token"],
                 "node": client.base}
        try:
            status, answer = client.request("POST", f"/api/jobs/{job['id']}/{f}",
                                            {"lease_token": job["lease_token"], **body})
        except Unanswered as error:
            self.history.op(name, f, t0, None, {**value, "error": str(error)})
            return None
        if status == 200 and f == "heartbeat":
            value["lease_expires_at"] = answer["lease_expires_at"]
        if status == 200 and f == "fail":
            value["status_after"] = answer.get("status")
        if status != 200:
            value.update(status=status, error=answer)
        ok = outcome(status)
        self.history.op(name, f, t0, ok, value)
        return ok

    def _work(self, name: str, client: Client, rng: random.Random, job: dict[str, Any]) -> None:
        if self.draining.is_set():
            self._ack(name, client, "complete", job, {})
            return
        what = rng.choices(["complete", "heartbeat", "fail", "slow", "abandon"],
                           weights=[60, 15, 12, 8, 5])[0]
        if what == "abandon":
            return
        if what == "slow":
            # Past its lease: the completion must be refused if the lease has ended.
            time.sleep(self.setup.lease_s + rng.uniform(0.5, 1.5))
            self._ack(name, client, "complete", job, {})
            return
        time.sleep(rng.uniform(0.0, 0.2))
        if what == "heartbeat":
            if self._ack(name, client, "heartbeat", job, {"lease": "3s"}):
                time.sleep(rng.uniform(0.0, 0.5))
            self._ack(name, client, "complete", job, {})
            return
        if what == "fail":
            self._ack(name, client, "fail", job, {"error": "harness says no"})
            return
        self._ack(name, client, "complete", job, {})

    # --- Zaqar claimers ----------------------------------------------------------------------

    def _claimer(self, name: str, rng: random.Random) -> None:
        client = Client(self.bases, rng)
        while self.working.is_set():
            t0 = time.time()
            value: dict[str, Any] = {"node": client.base, "ttl": 60, "grace": 60}
            try:
                status, answer = client.request(
                    "POST", f"/v2/queues/{ZAQAR_QUEUE}/claims?limit=5",
                    {"ttl": 60, "grace": 60}, ZAQAR_HEADERS)
            except Unanswered as error:
                self.history.op(name, "zaqar-claim", t0, None, {**value, "error": str(error)})
                time.sleep(0.2)
                continue
            if status == 204:
                self.history.op(name, "zaqar-claim", t0, True, {**value, "messages": []})
                time.sleep(0.3)
                continue
            if status != 201:
                self.history.op(name, "zaqar-claim", t0, outcome(status),
                                {**value, "status": status, "error": answer})
                time.sleep(0.2)
                continue
            messages = []
            claim = None
            for m in answer.get("messages", []):
                href = m["href"]
                messages.append(int(href.split("/messages/")[1].split("?")[0]))
                claim = href.split("claim_id=")[1] if "claim_id=" in href else claim
            value.update(claim=claim, messages=messages)
            self.history.op(name, "zaqar-claim", t0, True, value)
            release = rng.random() < 0.2
            for message in messages:
                if release or rng.random() < 0.1:
                    continue
                self._zaqar_delete(name, client, message, claim)
            if release and claim:
                self._zaqar_release(name, client, claim)
        client.close()

    def _zaqar_delete(self, name: str, client: Client, message: int, claim: str | None) -> None:
        t0 = time.time()
        value = {"message": message, "claim": claim, "node": client.base}
        try:
            status, answer = client.request(
                "DELETE", f"/v2/queues/{ZAQAR_QUEUE}/messages/{message}?claim_id={claim}",
                None, ZAQAR_HEADERS)
        except Unanswered as error:
            self.history.op(name, "zaqar-delete", t0, None, {**value, "error": str(error)})
            return
        if status != 204:
            value.update(status=status, error=answer)
        self.history.op(name, "zaqar-delete", t0, outcome(status), value)

    def _zaqar_release(self, name: str, client: Client, claim: str) -> None:
        t0 = time.time()
        value = {"claim": claim, "node": client.base}
        try:
            status, answer = client.request(
                "DELETE", f"/v2/queues/{ZAQAR_QUEUE}/claims/{claim}", None, ZAQAR_HEADERS)
        except Unanswered as error:
            self.history.op(name, "zaqar-release", t0, None, {**value, "error": str(error)})
            return
        if status != 204:
            value.update(status=status, error=answer)
        self.history.op(name, "zaqar-release", t0, outcome(status), value)
