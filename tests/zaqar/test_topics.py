"""Topics: /v2/topics, their messages, stats, purge and subscriptions, as Zaqar 23's topic
resources (zaqar/transport/wsgi/v2_0/topic*.py) and its MongoDB topic driver describe them.

python-zaqarclient (4.7.0, and every release so far) has no topic API, so these tests speak
HTTP. The official client is still used where topics meet queues: a queue of the same name,
made and fed through the client, is another thing than the topic.

`tenax_only`: Zaqar 23.0.1 itself answers the topic's messages and subscriptions routes 500
(their resources are the queue's, which take `queue_name`, and the route passes `topic_name`),
and its Redis driver answers every other topic route 503 (docs/zaqar.md, "Where Tenax differs").
"""

import pytest

from zaqar_helpers import RawApi, assert_error

pytestmark = pytest.mark.tenax_only

FIRST_DELIVERY_TIMEOUT = 10.0
TOPIC_DEFAULTS = {
    "_max_messages_post_size": 262144,
    "_default_message_ttl": 3600,
    "_default_message_delay": 0,
}


def test_topic_lifecycle(api, queue_name):
    path = f"/v2/topics/{queue_name}"
    assert api.get(f"{path}/stats").json() == {"messages": {"claimed": 0, "free": 0, "total": 0}}
    assert api.get(path).status_code == 404
    created = api.put(path, json_body={"messages": {"ttl": 600}})
    assert created.status_code == 201
    assert created.headers["location"] == path
    assert api.put(path).status_code == 204
    assert api.get(path).json() == {"messages": {"ttl": 600}, **TOPIC_DEFAULTS}
    patched = api.patch(
        path,
        json_body=[{"op": "add", "path": "/metadata/color", "value": "red"}],
        headers={"Content-Type": "application/openstack-messaging-v2.0-json-patch"},
    )
    assert patched.status_code == 200
    assert patched.json()["color"] == "red"
    listed = api.get("/v2/topics").json()
    assert [t["name"] for t in listed["topics"]] == [queue_name]
    assert listed["topics"][0]["href"] == path
    assert api.get("/v2/queues").json()["queues"] == []
    assert api.delete(path).status_code == 204
    assert api.get(path).status_code == 404


def test_bad_topic_names_are_zaqars_400(api):
    assert_error(
        api.put("/v2/topics/a%20b"),
        400,
        "Invalid topic identification",
        "The format of the submitted topic name or project id is not valid.",
    )


def test_topic_messages_are_posted_listed_read_and_deleted(api, queue_name):
    base = f"/v2/topics/{queue_name}/messages"
    posted = api.post(base, json_body={"messages": [{"body": {"n": 1}, "ttl": 300}, {"body": 2}]})
    assert posted.status_code == 201
    hrefs = posted.json()["resources"]
    assert all(href.startswith(base + "/") for href in hrefs)
    listed = api.get(f"{base}?echo=true").json()
    assert [m["body"] for m in listed["messages"]] == [{"n": 1}, 2]
    one = api.get(hrefs[0]).json()
    assert (one["body"], one["ttl"], one["href"]) == ({"n": 1}, 300, hrefs[0])
    assert api.delete(hrefs[0]).status_code == 204
    assert api.get(hrefs[0]).status_code == 404
    stats = api.get(f"/v2/topics/{queue_name}/stats").json()["messages"]
    assert (stats["free"], stats["claimed"], stats["total"]) == (1, 0, 1)
    purged = api.post(f"/v2/topics/{queue_name}/purge", json_body={"resource_types": ["messages"]})
    assert purged.status_code == 204
    assert api.get(f"{base}?echo=true").json()["messages"] == []
    # No claims on a topic.
    claimed = api.post(f"/v2/topics/{queue_name}/claims", json_body={"ttl": 60, "grace": 60})
    assert claimed.status_code == 404


def test_a_queue_of_the_same_name_is_another_thing(api, client, queue_name):
    queue = client.queue(queue_name, force_create=True)
    queue.post([{"body": "to the queue"}])
    api.put(f"/v2/topics/{queue_name}", json_body={"kind": "topic"})
    topic_messages = f"/v2/topics/{queue_name}/messages"
    api.post(topic_messages, json_body={"messages": [{"body": "to the topic"}]})
    assert [m.body for m in queue.messages(echo=True)] == ["to the queue"]
    topic = api.get(f"/v2/topics/{queue_name}/messages?echo=true").json()
    assert [m["body"] for m in topic["messages"]] == ["to the topic"]
    assert "kind" not in queue.metadata()
    assert [q.name for q in client.queues()[0]] == [queue_name]


def test_a_topic_message_goes_to_the_topics_subscribers(api, receiver, queue_name):
    base = f"/v2/topics/{queue_name}"
    subscribed = api.post(
        f"{base}/subscriptions", json_body={"subscriber": receiver.url, "ttl": 3600}
    )
    assert subscribed.status_code == 201
    sid = subscribed.json()["subscription_id"]
    [shown] = api.get(f"{base}/subscriptions").json()["subscriptions"]
    assert (shown["id"], shown["source"], shown["subscriber"]) == (sid, queue_name, receiver.url)
    assert api.get(f"/v2/queues/{queue_name}/subscriptions").json()["subscriptions"] == []
    api.post(f"{base}/messages", json_body={"messages": [{"body": {"alert": 1}, "ttl": 300}]})
    [delivery] = receiver.wait_for(1, FIRST_DELIVERY_TIMEOUT)
    assert delivery.json() == {
        "ttl": 300,
        "body": {"alert": 1},
        "Message_Type": "Notification",
        "queue_name": queue_name,
    }
    assert api.delete(f"{base}/subscriptions/{sid}").status_code == 204
    assert api.get(f"{base}/subscriptions/{sid}").status_code == 404
