"""Webhook notifications: Zaqar's notification body, and retries on the `_retry_policy` schedule.

A receiver on 127.0.0.1 records when each attempt arrives. A retry must never come early, and
may come at most LATE seconds late (ZAQAR_WEBHOOK_LATE_TOLERANCE, default 0.9).

Zaqar's `_retry_policy` is in whole seconds, and Zaqar refuses a policy whose maximum_delay is
less than minimum_delay + 10, so the quick schedules here stop before the backoff phase's long
delays: the receiver succeeds once the immediate and minimum-delay retries are used.

Why LATE is 0.9 s: these tests check that retries follow the policy's schedule, whose steps are
whole seconds, so any wrong step moves a retry by a second or more (and an early one fails
EARLY). The server's own suite (crates/tenax/tests/it/webhooks.rs) checks each schedule exactly,
on a manual clock; over real time a retry is as punctual as the machine lets it be. A CI machine
once delivered a retry 0.56 s late here, while its immediate
retries took 39 ms (3-5 ms on a quiet machine); a tolerance just under a step keeps such a stall
from failing a schedule test.
"""

import os
import time

import pytest

from zaqar_helpers import RESET, Receiver

EARLY = 0.05  # seconds; only clock granularity
LATE = float(os.environ.get("ZAQAR_WEBHOOK_LATE_TOLERANCE", "0.9"))
FIRST_DELIVERY_TIMEOUT = 10.0


def notification(queue_name, body, ttl):
    """What Zaqar POSTs for one message (zaqar/notification/notifier.py, tasks/webhook.py)."""
    return {"ttl": ttl, "body": body, "Message_Type": "Notification", "queue_name": queue_name}


def gaps(deliveries):
    times = [delivery.at for delivery in deliveries]
    return [later - earlier for earlier, later in zip(times, times[1:])]


def assert_schedule(deliveries, expected):
    measured = gaps(deliveries)
    assert len(measured) == len(expected), f"gaps {measured}, expected {expected}"
    for retry, (gap, delay) in enumerate(zip(measured, expected), start=1):
        assert delay - EARLY <= gap <= delay + LATE, (
            f"retry {retry} came {gap:.3f} s after the attempt before it; expected {delay} s "
            f"(-{EARLY}/+{LATE}); all gaps: {[round(g, 3) for g in measured]}"
        )


def fail_first(count, failure):
    return lambda n: failure if n <= count else 204


def assert_no_more_deliveries(receiver, count, quiet=1.5):
    time.sleep(quiet)
    assert len(receiver.snapshot()) == count


def subscribe(client, queue_name, url, options=None):
    return client.subscription(queue_name, subscriber=url, ttl=3600, options=options or {})


# -- the notification -------------------------------------------------------------------------


def test_notification_is_the_message_with_its_queue_name_and_type(client, receiver, queue_name):
    subscribe(client, queue_name, receiver.url)
    client.queue(queue_name).post({"ttl": 300, "body": {"event": "created", "id": 7}})
    [delivery] = receiver.wait_for(1, FIRST_DELIVERY_TIMEOUT)
    assert delivery.path == "/hook"
    assert delivery.headers["content-type"].startswith("application/json")
    assert delivery.json() == notification(queue_name, {"event": "created", "id": 7}, 300)
    assert_no_more_deliveries(receiver, 1, quiet=0.5)


def test_notification_carries_the_default_ttl_when_none_was_posted(client, receiver, queue_name):
    subscribe(client, queue_name, receiver.url)
    client.queue(queue_name).post({"body": "plain"})
    [delivery] = receiver.wait_for(1, FIRST_DELIVERY_TIMEOUT)
    assert delivery.json() == notification(queue_name, "plain", 3600)


def test_each_message_of_a_batch_is_notified_separately(client, receiver, queue_name):
    subscribe(client, queue_name, receiver.url)
    client.queue(queue_name).post([{"ttl": 60, "body": i} for i in range(3)])
    deliveries = receiver.wait_for(3, FIRST_DELIVERY_TIMEOUT)
    assert sorted(d.json()["body"] for d in deliveries) == [0, 1, 2]
    assert all(d.json() == notification(queue_name, d.json()["body"], 60) for d in deliveries)


def test_every_subscriber_of_the_queue_is_notified(client, receiver, queue_name):
    second = Receiver().start()
    try:
        subscribe(client, queue_name, receiver.url)
        subscribe(client, queue_name, second.url)
        client.queue(queue_name).post({"ttl": 60, "body": "both"})
        for each in (receiver, second):
            [delivery] = each.wait_for(1, FIRST_DELIVERY_TIMEOUT)
            assert delivery.json() == notification(queue_name, "both", 60)
    finally:
        second.stop()


def test_messages_posted_before_subscribing_are_not_notified(client, receiver, queue_name):
    client.queue(queue_name).post({"ttl": 60, "body": "before"})
    subscribe(client, queue_name, receiver.url)
    client.queue(queue_name).post({"ttl": 60, "body": "after"})
    [delivery] = receiver.wait_for(1, FIRST_DELIVERY_TIMEOUT)
    assert delivery.json()["body"] == "after"
    assert_no_more_deliveries(receiver, 1, quiet=0.5)


def test_deleted_subscription_is_not_notified(client, receiver, queue_name):
    subscription = subscribe(client, queue_name, receiver.url)
    subscription.delete()
    client.queue(queue_name).post({"ttl": 60, "body": "nobody"})
    assert_no_more_deliveries(receiver, 0)


# -- retries ----------------------------------------------------------------------------------

QUICK_POLICY = {
    "retries_with_no_delay": 1,
    "minimum_delay_retries": 2,
    "minimum_delay": 1,
    "maximum_delay": 11,
    "maximum_delay_retries": 0,
    "retry_backoff_function": "linear",
}
# Retry 1 at once, retries 2-3 after minimum_delay, retry 4 opens the backoff phase at
# minimum_delay (Tenax's linear backoff then reaches maximum_delay, 11 s, at retry 5).


@pytest.mark.tenax_only  # Zaqar retries only connection errors: a 5xx is never retried
def test_5xx_answers_are_retried_on_the_retry_policy_schedule(client, receiver, queue_name):
    receiver.plan = fail_first(4, 500)
    subscribe(client, queue_name, receiver.url, {"_retry_policy": QUICK_POLICY})
    client.queue(queue_name).post({"ttl": 300, "body": {"n": 1}})
    deliveries = receiver.wait_for(5, FIRST_DELIVERY_TIMEOUT + 3 + 4 * LATE)
    assert len(deliveries) == 5
    assert_schedule(deliveries, [0, 1, 1, 1])
    expected = notification(queue_name, {"n": 1}, 300)
    assert all(delivery.json() == expected for delivery in deliveries)
    assert_no_more_deliveries(receiver, 5)


def test_connection_errors_are_retried_on_the_retry_policy_schedule(client, receiver, queue_name):
    receiver.plan = fail_first(3, RESET)
    subscribe(client, queue_name, receiver.url, {"_retry_policy": QUICK_POLICY})
    client.queue(queue_name).post({"ttl": 300, "body": "reset"})
    deliveries = receiver.wait_for(4, FIRST_DELIVERY_TIMEOUT + 2 + 3 * LATE)
    assert len(deliveries) == 4
    assert_schedule(deliveries, [0, 1, 1])
    assert all(d.json() == notification(queue_name, "reset", 300) for d in deliveries)
    assert_no_more_deliveries(receiver, 4)


@pytest.mark.tenax_only  # same schedule as above, through 503 and 429 instead of resets
def test_503_and_429_are_retried_like_5xx(client, receiver, queue_name):
    answers = {1: 503, 2: 429, 3: 502}
    receiver.plan = lambda n: answers.get(n, 204)
    subscribe(client, queue_name, receiver.url, {"_retry_policy": QUICK_POLICY})
    client.queue(queue_name).post({"ttl": 300, "body": "busy"})
    deliveries = receiver.wait_for(4, FIRST_DELIVERY_TIMEOUT + 2 + 3 * LATE)
    assert_schedule(deliveries, [0, 1, 1])
    assert_no_more_deliveries(receiver, 4)


def test_4xx_answers_are_not_retried(client, receiver, queue_name):
    receiver.plan = lambda n: 404
    subscribe(client, queue_name, receiver.url, {"_retry_policy": QUICK_POLICY})
    client.queue(queue_name).post({"ttl": 300, "body": "gone"})
    receiver.wait_for(1, FIRST_DELIVERY_TIMEOUT)
    assert_no_more_deliveries(receiver, 1, quiet=2.0)


def test_without_any_policy_zaqars_default_retries_three_times_at_once(
    client, receiver, queue_name
):
    # Zaqar's defaults: 3 retries with no delay, then 3 at 5 s, a linear backoff to 30 s, ...
    receiver.plan = fail_first(3, RESET)
    subscribe(client, queue_name, receiver.url)
    client.queue(queue_name).post({"ttl": 300, "body": "defaults"})
    deliveries = receiver.wait_for(4, FIRST_DELIVERY_TIMEOUT + 3 * LATE)
    assert_schedule(deliveries, [0, 0, 0])
    assert_no_more_deliveries(receiver, 4)


def test_queue_retry_policy_applies_to_subscriptions_without_one(
    client, api, receiver, queue_name
):
    api.put(
        f"/v2/queues/{queue_name}",
        json_body={
            "_retry_policy": {
                "retries_with_no_delay": 0,
                "minimum_delay_retries": 1,
                "minimum_delay": 1,
                "maximum_delay": 11,
                "maximum_delay_retries": 0,
            }
        },
    )
    receiver.plan = fail_first(2, RESET)
    subscribe(client, queue_name, receiver.url)
    client.queue(queue_name).post({"ttl": 300, "body": "queue policy"})
    deliveries = receiver.wait_for(3, FIRST_DELIVERY_TIMEOUT + 2 + 2 * LATE)
    assert_schedule(deliveries, [1, 1])
    assert_no_more_deliveries(receiver, 3)


def test_subscription_retry_policy_overrides_the_queues(client, api, receiver, queue_name):
    api.put(
        f"/v2/queues/{queue_name}",
        json_body={"_retry_policy": {"retries_with_no_delay": 0, "minimum_delay_retries": 1}},
    )
    receiver.plan = fail_first(1, RESET)
    subscribe(
        client,
        queue_name,
        receiver.url,
        {"_retry_policy": {"retries_with_no_delay": 1, "minimum_delay": 1, "maximum_delay": 11}},
    )
    client.queue(queue_name).post({"ttl": 300, "body": "subscription policy"})
    deliveries = receiver.wait_for(2, FIRST_DELIVERY_TIMEOUT + LATE)
    assert_schedule(deliveries, [0])


def test_ignore_subscription_override_makes_the_queue_policy_win(
    client, api, receiver, queue_name
):
    api.put(
        f"/v2/queues/{queue_name}",
        json_body={
            "_retry_policy": {
                "retries_with_no_delay": 0,
                "minimum_delay_retries": 1,
                "minimum_delay": 1,
                "maximum_delay": 11,
                "maximum_delay_retries": 0,
                "ignore_subscription_override": True,
            }
        },
    )
    receiver.plan = fail_first(1, RESET)
    subscribe(
        client,
        queue_name,
        receiver.url,
        {"_retry_policy": {"retries_with_no_delay": 3, "minimum_delay": 1, "maximum_delay": 11}},
    )
    client.queue(queue_name).post({"ttl": 300, "body": "queue wins"})
    deliveries = receiver.wait_for(2, FIRST_DELIVERY_TIMEOUT + 1 + LATE)
    assert_schedule(deliveries, [1])


@pytest.mark.slow
@pytest.mark.tenax_only  # Zaqar's backoff is range(1, 11, 5): 1 s then 6 s, never reaching 11 s
def test_delivery_stops_when_the_retry_policy_is_used_up(client, receiver, queue_name):
    # 0 immediate, 0 at minimum, backoff of (11 - 1) / 5 = 2 retries, 0 at maximum:
    # Tenax's linear backoff waits 1 s then 11 s (Zaqar's own range() gives 1 s then 6 s).
    receiver.plan = lambda n: RESET
    policy = {
        "retries_with_no_delay": 0,
        "minimum_delay_retries": 0,
        "minimum_delay": 1,
        "maximum_delay": 11,
        "maximum_delay_retries": 0,
    }
    subscribe(client, queue_name, receiver.url, {"_retry_policy": policy})
    client.queue(queue_name).post({"ttl": 300, "body": "doomed"})
    deliveries = receiver.wait_for(3, FIRST_DELIVERY_TIMEOUT + 12 + 2 * LATE)
    assert_schedule(deliveries, [1, 11])
    assert_no_more_deliveries(receiver, 3, quiet=5)
