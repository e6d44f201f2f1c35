"""Zaqar's websocket transport: python-zaqarclient's `ws` transport (websocket-client underneath)
against the server's root, `ws://host:port/`.

The client's websocket transport sends every operation's `content` as the frame's body and
ignores `params` (its own docstring says so), so, as with a real Zaqar, requests name their
queue in the content; the operation names are Zaqar's websocket actions.
"""

import json
import uuid

import pytest
from zaqarclient import errors as client_errors
from zaqarclient.queues import client as zaqar_client
from zaqarclient.transport import errors as transport_errors
from zaqarclient.transport import request as client_request


@pytest.fixture
def ws_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://", 1) + "/"


def _conf(project: str) -> dict:
    # The ws transport reads os_auth_token (it authenticates first); without tokens (loopback)
    # any value is accepted.
    return {"auth_opts": {"backend": "noauth",
                          "options": {"os_project_id": project, "os_auth_token": "none"}}}


@pytest.fixture
def ws(ws_url: str, project: str):
    cli = zaqar_client.Client(url=ws_url, version=2, conf=_conf(project))
    transport = cli._get_transport(client_request.Request(ws_url))
    yield Ws(ws_url, transport)
    transport.cleanup()


class Ws:
    def __init__(self, url, transport):
        self.url = url
        self.transport = transport

    def send(self, action: str, body: dict | None = None):
        content = None if body is None else json.dumps(body)
        return self.transport.send(client_request.Request(self.url, action, content=content))

    def body(self, action: str, body: dict | None = None):
        return json.loads(self.send(action, body).content)


def test_the_client_authenticates_then_manages_a_queue(ws, queue_name):
    response = ws.send("queue_create", {"queue_name": queue_name, "metadata": {"k": "v"}})
    assert response.status_code == 201
    assert json.loads(response.content) == f"Queue {queue_name} created."
    assert ws.body("queue_list") == {"queues": [{"name": queue_name}]}
    assert ws.body("queue_get", {"queue_name": queue_name})["k"] == "v"
    stats = ws.body("queue_get_stats", {"queue_name": queue_name})
    assert stats["messages"]["total"] == 0
    assert ws.send("queue_delete", {"queue_name": queue_name}).status_code == 204
    assert ws.body("queue_list") == {"queues": []}


def test_messages_and_claims_over_the_websocket(ws, queue_name):
    posted = ws.body("message_post", {"queue_name": queue_name,
                                      "messages": [{"body": {"n": 1}, "ttl": 300}, {"body": 2}]})
    ids = posted["message_ids"]
    assert len(ids) == 2
    listed = ws.body("message_list", {"queue_name": queue_name, "echo": True})
    assert [m["body"] for m in listed["messages"]] == [{"n": 1}, 2]
    assert all(m["claim_id"] is None for m in listed["messages"])
    one = ws.body("message_get", {"queue_name": queue_name, "message_id": ids[0]})
    assert one["messages"]["ttl"] == 300
    claim = ws.send("claim_create", {"queue_name": queue_name, "ttl": 60, "grace": 60})
    assert claim.status_code == 201
    claimed = json.loads(claim.content)
    cid = claimed["claim_id"]
    assert [m["claim_id"] for m in claimed["messages"]] == [cid, cid]
    assert ws.body("claim_get", {"queue_name": queue_name, "claim_id": cid})["ttl"] == 60
    updated = ws.send("claim_update", {"queue_name": queue_name, "claim_id": cid, "ttl": 90})
    assert updated.status_code == 204
    for message_id in ids:
        deleted = ws.send("message_delete",
                          {"queue_name": queue_name, "message_id": message_id, "claim_id": cid})
        assert deleted.status_code == 204
    nothing = ws.send("claim_create", {"queue_name": queue_name, "ttl": 60, "grace": 60})
    assert nothing.status_code == 204
    assert json.loads(nothing.content) == {"claim_id": None}


def test_errors_raise_the_clients_exceptions(ws, queue_name):
    with pytest.raises(transport_errors.MalformedRequest) as refused:
        ws.send("queue_create", {})
    assert "Schema validation failed." in str(refused.value)
    with pytest.raises(transport_errors.MalformedRequest) as refused:
        ws.send("queue_fly", {"queue_name": queue_name})
    assert "queue_fly is not a valid action" in str(refused.value)
    with pytest.raises(transport_errors.ResourceNotFound):
        ws.send("claim_get", {"queue_name": queue_name, "claim_id": "abc"})
    with pytest.raises(client_errors.ZaqarError):
        ws.send("message_post", {"queue_name": queue_name, "messages": [{"body": 1, "ttl": 1}]})


def test_a_websocket_subscription_pushes_posted_messages(ws, ws_url, project, queue_name):
    created = ws.send("subscription_create", {"queue_name": queue_name, "ttl": 600})
    assert created.status_code == 201
    subscription = json.loads(created.content)["subscription_id"]
    # Another connection of the same project posts; this one is told.
    poster = zaqar_client.Client(url=ws_url, version=2, conf=_conf(project))
    poster_transport = poster._get_transport(client_request.Request(ws_url))
    try:
        poster_transport.send(client_request.Request(ws_url, "message_post", content=json.dumps(
            {"queue_name": queue_name, "messages": [{"body": {"pushed": True}, "ttl": 120}]})))
    finally:
        poster_transport.cleanup()
    notification = ws.transport.recv()
    assert notification == {"body": {"pushed": True}, "ttl": 120, "queue_name": queue_name,
                            "Message_Type": "Notification"}
    deleted = ws.send("subscription_delete",
                      {"queue_name": queue_name, "subscription_id": subscription})
    assert deleted.status_code == 204


def test_a_subscriber_url_makes_a_webhook_subscription(ws, queue_name, receiver):
    created = ws.body("subscription_create", {"queue_name": queue_name,
                                              "subscriber": receiver.url, "ttl": 3600})
    listed = ws.body("subscription_list", {"queue_name": queue_name})
    assert [s["id"] for s in listed["subscriptions"]] == [created["subscription_id"]]
    ws.send("message_post", {"queue_name": queue_name,
                             "messages": [{"body": "to the hook", "ttl": 60}]})
    delivered = receiver.wait_for(1, timeout=10)
    assert delivered[0].json()["body"] == "to the hook"


def test_another_project_sees_nothing(ws_url, ws, queue_name):
    ws.send("queue_create", {"queue_name": queue_name})
    cli = zaqar_client.Client(url=ws_url, version=2, conf=_conf(f"other-{uuid.uuid4().hex[:8]}"))
    other = cli._get_transport(client_request.Request(ws_url))
    try:
        answer = other.send(client_request.Request(ws_url, "queue_list"))
        assert json.loads(answer.content) == {"queues": []}
    finally:
        other.cleanup()
