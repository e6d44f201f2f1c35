"""Subscriptions: create, get, list, update, delete; which subscribers are accepted.

The subscribers here point at 127.0.0.1:9 (nothing listens): no message is posted while they
exist, so nothing is delivered. Deliveries are test_webhooks.py's subject.
"""

import pytest
from zaqarclient.transport import errors

from zaqar_helpers import assert_error

SUBSCRIPTION_KEYS = {"id", "source", "subscriber", "ttl", "age", "options", "confirmed"}
NOWHERE = "http://127.0.0.1:9/hook"


def test_create_answers_201_with_the_subscription_id(api, queue_name):
    response = api.post(
        f"/v2/queues/{queue_name}/subscriptions",
        json_body={"subscriber": NOWHERE, "ttl": 3600, "options": {"a": 1}},
    )
    assert response.status_code == 201
    assert response.headers["Location"] == f"/v2/queues/{queue_name}/subscriptions"
    document = response.json()
    assert set(document) == {"subscription_id"}
    assert isinstance(document["subscription_id"], str) and document["subscription_id"]


def test_client_creates_and_reads_back_a_subscription(client, queue_name):
    created = client.subscription(
        queue_name, subscriber=NOWHERE, ttl=3600, options={"a": 1, "b": [2]}
    )
    assert created.id
    loaded = client.subscription(queue_name, id=created.id)
    assert loaded.subscriber == NOWHERE
    assert loaded.ttl == 3600
    assert loaded.options == {"a": 1, "b": [2]}
    assert isinstance(loaded.age, int) and 0 <= loaded.age <= 5
    assert isinstance(loaded.confirmed, bool)


def test_get_answers_zaqars_subscription_object(api, queue_name):
    sid = api.post(
        f"/v2/queues/{queue_name}/subscriptions",
        json_body={"subscriber": NOWHERE, "ttl": 600, "options": {"x": "y"}},
    ).json()["subscription_id"]
    response = api.get(f"/v2/queues/{queue_name}/subscriptions/{sid}")
    assert response.status_code == 200
    document = response.json()
    assert set(document) == SUBSCRIPTION_KEYS
    assert document["id"] == sid
    assert document["source"] == queue_name
    assert document["subscriber"] == NOWHERE
    assert document["ttl"] == 600
    assert document["options"] == {"x": "y"}
    assert isinstance(document["age"], int)
    assert isinstance(document["confirmed"], bool)


def test_ttl_defaults_to_3600_and_options_to_empty(api, queue_name):
    sid = api.post(
        f"/v2/queues/{queue_name}/subscriptions", json_body={"subscriber": NOWHERE}
    ).json()["subscription_id"]
    document = api.get(f"/v2/queues/{queue_name}/subscriptions/{sid}").json()
    assert (document["ttl"], document["options"]) == (3600, {})


def test_same_subscriber_twice_gives_the_same_subscription(client, queue_name):
    first = client.subscription(queue_name, subscriber=NOWHERE, ttl=3600)
    second = client.subscription(queue_name, subscriber=NOWHERE, ttl=3600)
    assert first.id == second.id
    assert len(list(client.subscriptions(queue_name))) == 1


def test_subscribing_creates_the_queue(client, queue_name):
    client.subscription(queue_name, subscriber=NOWHERE, ttl=3600)
    queues, _ = client.queues()
    assert [q.name for q in queues] == [queue_name]


def test_list_subscriptions_of_a_queue(client, api, queue_name):
    urls = [f"http://127.0.0.1:9/hook{i}" for i in range(3)]
    for url in urls:
        client.subscription(queue_name, subscriber=url, ttl=3600)
    client.subscription(queue_name + "-other", subscriber=NOWHERE, ttl=3600)
    listed = list(client.subscriptions(queue_name))
    assert sorted(s.subscriber for s in listed) == urls
    assert all(s.queue_name == queue_name and s.id for s in listed)

    body = api.get(f"/v2/queues/{queue_name}/subscriptions").json()
    assert set(body) == {"subscriptions", "links"}
    assert all(set(item) == SUBSCRIPTION_KEYS for item in body["subscriptions"])
    [link] = body["links"]
    assert link["rel"] == "next"
    assert link["href"].startswith(f"/v2/queues/{queue_name}/subscriptions?")
    assert "marker=" in link["href"]


def test_list_subscriptions_pages(client, api, queue_name):
    urls = [f"http://127.0.0.1:9/page{i}" for i in range(3)]
    for url in urls:
        client.subscription(queue_name, subscriber=url, ttl=3600)
    first = api.get(f"/v2/queues/{queue_name}/subscriptions", params={"limit": 2}).json()
    assert len(first["subscriptions"]) == 2
    second = api.get(first["links"][0]["href"]).json()
    assert len(second["subscriptions"]) == 1
    third = api.get(second["links"][0]["href"]).json()
    assert third == {"subscriptions": [], "links": []}
    seen = first["subscriptions"] + second["subscriptions"]
    assert sorted(s["subscriber"] for s in seen) == urls
    streamed = client.subscriptions(queue_name, limit=2).stream()
    assert sorted(s.subscriber for s in streamed) == urls


def test_list_of_a_queue_without_subscriptions_is_empty(api, queue_name):
    response = api.get(f"/v2/queues/{queue_name}/subscriptions")
    assert response.status_code == 200
    assert response.json() == {"subscriptions": [], "links": []}


def test_list_limit_outside_1_to_20_is_400(api, queue_name):
    assert_error(
        api.get(f"/v2/queues/{queue_name}/subscriptions", params={"limit": 21}),
        400,
        "Invalid API request",
        "Limit must be at least 1 and may not be greater than 20.",
    )


def test_update_changes_ttl_options_and_subscriber(client, api, queue_name):
    subscription = client.subscription(queue_name, subscriber=NOWHERE, ttl=3600)
    subscription.update({"ttl": 7200, "options": {"new": True}})
    assert (subscription.ttl, subscription.options) == (7200, {"new": True})
    document = api.get(f"/v2/queues/{queue_name}/subscriptions/{subscription.id}").json()
    assert (document["ttl"], document["options"]) == (7200, {"new": True})
    subscription.update({"subscriber": "http://127.0.0.1:9/moved"})
    document = api.get(f"/v2/queues/{queue_name}/subscriptions/{subscription.id}").json()
    assert document["subscriber"] == "http://127.0.0.1:9/moved"


def test_update_answers_204_with_a_location(api, queue_name):
    sid = api.post(
        f"/v2/queues/{queue_name}/subscriptions", json_body={"subscriber": NOWHERE}
    ).json()["subscription_id"]
    path = f"/v2/queues/{queue_name}/subscriptions/{sid}"
    response = api.patch(path, json_body={"ttl": 120})
    assert response.status_code == 204
    assert response.headers["Location"] == path


def test_update_of_a_missing_subscription_is_404(api, queue_name):
    api.put(f"/v2/queues/{queue_name}")
    assert_error(
        api.patch(f"/v2/queues/{queue_name}/subscriptions/no-such-id", json_body={"ttl": 120}),
        404,
        "Not found",
        "Subscription no-such-id does not exist",
    )


def test_update_with_an_empty_body_is_400(api, queue_name):
    sid = api.post(
        f"/v2/queues/{queue_name}/subscriptions", json_body={"subscriber": NOWHERE}
    ).json()["subscription_id"]
    assert_error(
        api.patch(f"/v2/queues/{queue_name}/subscriptions/{sid}", json_body={}),
        400,
        "Invalid API request",
        "No subscription to create.",
    )


def test_delete_removes_the_subscription(client, api, queue_name):
    subscription = client.subscription(queue_name, subscriber=NOWHERE, ttl=3600)
    subscription.delete()
    assert list(client.subscriptions(queue_name)) == []
    with pytest.raises(errors.ResourceNotFound):
        client.subscription(queue_name, id=subscription.id)
    again = api.delete(f"/v2/queues/{queue_name}/subscriptions/{subscription.id}")
    assert again.status_code == 204


def test_get_of_a_missing_subscription_is_404(api, queue_name):
    api.put(f"/v2/queues/{queue_name}")
    assert_error(
        api.get(f"/v2/queues/{queue_name}/subscriptions/no-such-id"),
        404,
        "Not found",
        "Subscription no-such-id does not exist",
    )


def test_https_subscribers_are_accepted(api, queue_name):
    response = api.post(
        f"/v2/queues/{queue_name}/subscriptions",
        json_body={"subscriber": "https://127.0.0.1:9/secure"},
    )
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("document", "description"),
    [
        ({"ttl": 3600}, "Missing parameter subscriber in body."),
        (
            {"subscriber": NOWHERE, "ttl": 59},
            "The TTL for a subscription must be at least 60 seconds long.",
        ),
        ({"subscriber": NOWHERE, "ttl": "3600"}, "TTL must be an integer."),
        ({"subscriber": NOWHERE, "options": "x"}, "Options must be a dict."),
        ({"subscriber": NOWHERE, "options": {"_retry_policy": 5}}, "retry_policy must be a dict."),
        (
            {
                "subscriber": NOWHERE,
                "options": {"_retry_policy": {"retry_backoff_function": "fibonacci"}},
            },
            "invalid retry_backoff_function.",
        ),
        (
            {
                "subscriber": NOWHERE,
                "options": {"_retry_policy": {"minimum_delay": 30, "maximum_delay": 5}},
            },
            None,  # Zaqar: "minimum_delay must less than maximum_delay."; Tenax names the field
        ),
    ],
    ids=[
        "missing-subscriber",
        "ttl-59",
        "ttl-not-int",
        "options-not-object",
        "retry-policy-not-object",
        "retry-policy-bad-function",
        "retry-policy-max-below-min",
    ],
)
def test_invalid_subscriptions_are_400(api, queue_name, document, description):
    response = api.post(f"/v2/queues/{queue_name}/subscriptions", json_body=document)
    assert_error(response, 400, "Invalid API request", description)


def test_unsupported_subscriber_schemes_are_400(api, queue_name):
    error = assert_error(
        api.post(
            f"/v2/queues/{queue_name}/subscriptions", json_body={"subscriber": "ftp://x/y"}
        ),
        400,
        "Invalid API request",
    )
    assert error["description"].startswith(
        "The subscriber type of subscription must be supported in the list"
    )


@pytest.mark.tenax_only  # Zaqar also sends Keystone-trust notifications
@pytest.mark.parametrize(
    "subscriber",
    ["trust+http://127.0.0.1:9/t", "trust+https://127.0.0.1:9/t"],
)
def test_trust_subscribers_are_refused(client, api, queue_name, subscriber):
    error = assert_error(
        api.post(
            f"/v2/queues/{queue_name}/subscriptions", json_body={"subscriber": subscriber}
        ),
        400,
        "Invalid API request",
    )
    assert error["description"].startswith(
        "The subscriber type of subscription must be supported in the list"
    )
    with pytest.raises(errors.MalformedRequest):
        client.subscription(queue_name, subscriber=subscriber, ttl=3600)


def test_subscriptions_of_another_queue_are_not_visible(client, api, queue_name):
    created = client.subscription(queue_name, subscriber=NOWHERE, ttl=3600)
    response = api.get(f"/v2/queues/{queue_name}-other/subscriptions/{created.id}")
    assert response.status_code == 404
