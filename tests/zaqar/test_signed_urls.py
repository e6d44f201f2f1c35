"""Pre-signed URLs: `queue.signed_url()` and a client on the `signed-url` auth backend."""

import pytest
from zaqarclient.queues import client as zaqar_client
from zaqarclient.transport import errors

from zaqar_helpers import assert_error


def signed_client(base_url: str, project: str, signed: dict) -> object:
    options = {
        "expires": signed["expires"],
        "methods": signed["methods"],
        "paths": signed["paths"],
        "signature": signed["signature"],
        "os_project_id": project,
    }
    conf = {"auth_opts": {"backend": "signed-url", "options": options}}
    return zaqar_client.Client(base_url, version=2, conf=conf)


def test_signed_url_admits_its_paths_and_methods(base_url, client, project, queue_name, api):
    queue = client.queue(queue_name, force_create=True)
    signed = queue.signed_url(paths=["messages"], methods=["GET", "POST"], ttl_seconds=300)
    assert signed["paths"] == [f"/v2/queues/{queue_name}/messages"]
    assert signed["methods"] == ["GET", "POST"]
    assert signed["project"] == project
    assert len(signed["signature"]) == 64

    shared = signed_client(base_url, project, signed).queue(queue_name, auto_create=False)
    shared.post([{"body": {"n": 1}, "ttl": 60}])
    bodies = [m.body for m in shared.messages(echo=True)]
    assert bodies == [{"n": 1}]
    assert [m.body for m in queue.messages(echo=True)] == [{"n": 1}]

    # Nothing else: another path (the queue's metadata), another method.
    with pytest.raises(errors.ResourceNotFound):
        shared.metadata(force_reload=True)
    headers = {
        "URL-Signature": signed["signature"],
        "URL-Expires": signed["expires"],
        "URL-Methods": ",".join(signed["methods"]),
        "URL-Paths": ",".join(signed["paths"]),
    }
    assert_error(api.delete(f"/v2/queues/{queue_name}/messages?ids=1", headers=headers), 404)
    assert api.get(f"/v2/queues/{queue_name}/messages?echo=true", headers=headers).ok
    altered = dict(headers, **{"URL-Methods": "DELETE,GET,POST"})
    assert_error(api.get(f"/v2/queues/{queue_name}/messages", headers=altered), 404)


def test_share_refuses_unknown_paths(client, queue_name):
    queue = client.queue(queue_name, force_create=True)
    with pytest.raises(errors.MalformedRequest):
        queue.signed_url(paths=["queues"])
