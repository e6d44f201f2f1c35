"""Client-ID and X-Project-ID: required on every /v2 route; projects are separate namespaces."""

import uuid

import pytest

from zaqar_helpers import RawApi, assert_error

# -- Client-ID --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v2/queues", "/v2/ping", "/v2/", "/v2/queues/q/messages"])
def test_client_id_is_required_on_every_v2_route(api, path):
    response = api.get(path, replace_headers={"X-Project-ID": api.project})
    assert_error(response, 400, "Missing header value", 'The "Client-Id" header is required.')


@pytest.mark.parametrize(
    "client_id", ["not-a-uuid", "1234", "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e1", "g" * 32]
)
def test_client_id_must_be_a_uuid(api, client_id):
    response = api.get(
        "/v2/queues", replace_headers={"X-Project-ID": api.project, "Client-ID": client_id}
    )
    assert_error(response, 400, "Wrong UUID value", "Malformed hexadecimal UUID.")


@pytest.mark.parametrize(
    "client_id",
    [
        str(uuid.uuid4()),
        uuid.uuid4().hex,  # what python-zaqarclient sends by default
        str(uuid.uuid4()).upper(),
        "{" + str(uuid.uuid4()) + "}",
        "urn:uuid:" + str(uuid.uuid4()),
    ],
    ids=["dashed", "dashless", "upper-case", "braces", "urn"],
)
def test_client_id_in_any_uuid_spelling_is_accepted(api, client_id):
    response = api.get(
        "/v2/queues", replace_headers={"X-Project-ID": api.project, "Client-ID": client_id}
    )
    assert response.status_code == 200, response.text


def test_the_official_client_sends_a_dashless_client_id(client):
    assert len(client.client_uuid) == 32 and "-" not in client.client_uuid
    assert client.ping() is True
    assert client.queues()[0] is not None


# -- X-Project-ID -----------------------------------------------------------------------------


def test_project_header_is_required(api):
    response = api.get("/v2/queues", replace_headers={"Client-ID": api.client_id})
    assert_error(response, 400, "Project-Id Missing", "The header X-PROJECT-ID was missing")


def test_empty_project_header_is_400(api):
    response = api.get(
        "/v2/queues", replace_headers={"Client-ID": api.client_id, "X-Project-ID": ""}
    )
    assert_error(
        response,
        400,
        "Empty project header not allowed",
        "X-PROJECT-ID cannot be an empty string. Specify the right header X-PROJECT-ID and retry.",
    )


def test_project_ids_longer_than_256_characters_are_400(base_url, queue_name):
    api = RawApi(base_url, "p" * 257)
    assert_error(
        api.put(f"/v2/queues/{queue_name}"),
        400,
        "Invalid queue identification",
        "The format of the submitted queue name or project id is not valid.",
    )


@pytest.mark.parametrize("project", ["JAM Project", "café", "a:b", "p" * 250])
def test_project_ids_of_any_characters_up_to_256_are_projects(make_client, queue_name, project):
    # As Zaqar: the only rule on a project id is its length (its own unit tests use
    # "JAM Project"); the client sends it as Latin-1. Each run's id is its own (+ 6 digits).
    project += uuid.uuid4().hex[:6]
    client = make_client(project)
    queue = client.queue(queue_name, force_create=True)
    queue.post([{"body": project}])
    assert [m.body for m in queue.messages(echo=True)] == [project]
    assert [q.name for q in client.queues()[0]] == [queue_name]
    assert list(make_client(f"other {uuid.uuid4().hex}").queues()[0]) == []


def test_noauth_client_without_a_project_uses_zaqars_placeholder(make_client, base_url):
    client = make_client(None)
    name = f"noauth-{uuid.uuid4().hex[:8]}"
    client.queue(name, force_create=True)
    placeholder = RawApi(base_url, "fake_project_id_for_noauth")
    assert name in [q["name"] for q in _all_queues(placeholder)]
    placeholder.delete(f"/v2/queues/{name}")


def _all_queues(api):
    queues, path = [], "/v2/queues?limit=20"
    while True:
        body = api.get(path).json()
        if not body["queues"]:
            return queues
        queues += body["queues"]
        path = body["links"][0]["href"]


def test_projects_see_only_their_own_queues(make_client, queue_name):
    alice = make_client(f"alice-{uuid.uuid4().hex[:8]}")
    bob = make_client(f"bob-{uuid.uuid4().hex[:8]}")
    alice_queue = alice.queue(queue_name, force_create=True)
    alice_queue.metadata(new_meta={"owner": "alice"})
    alice_queue.post([{"body": "for alice"}])

    assert list(bob.queues()[0]) == []
    bob_queue = bob.queue(queue_name, auto_create=False)
    assert "owner" not in bob_queue.metadata()
    assert bob_queue.stats["messages"]["total"] == 0
    assert list(bob_queue.messages(echo=True)) == []
    assert bob_queue.claim(ttl=60, grace=60).id is None
    assert list(bob_queue.pop(5)) == []


def test_same_queue_name_in_two_projects_are_two_queues(base_url, queue_name):
    alice = RawApi(base_url, f"alice-{uuid.uuid4().hex[:8]}")
    bob = RawApi(base_url, f"bob-{uuid.uuid4().hex[:8]}")
    assert alice.put(f"/v2/queues/{queue_name}").status_code == 201
    assert bob.put(f"/v2/queues/{queue_name}").status_code == 201
    [alice_id] = alice.post_messages(queue_name, [{"body": "a"}])
    bob.post_messages(queue_name, [{"body": "b"}])
    assert bob.get(f"/v2/queues/{queue_name}/messages/{alice_id}").status_code == 404
    assert bob.delete(f"/v2/queues/{queue_name}/messages/{alice_id}").status_code == 204
    assert alice.get(f"/v2/queues/{queue_name}/messages/{alice_id}").status_code == 200
    bob.delete(f"/v2/queues/{queue_name}")
    assert alice.get(f"/v2/queues/{queue_name}/stats").json()["messages"]["total"] == 1


def test_projects_see_only_their_own_subscriptions(base_url, queue_name):
    alice = RawApi(base_url, f"alice-{uuid.uuid4().hex[:8]}")
    bob = RawApi(base_url, f"bob-{uuid.uuid4().hex[:8]}")
    sid = alice.post(
        f"/v2/queues/{queue_name}/subscriptions",
        json_body={"subscriber": "http://127.0.0.1:9/alice"},
    ).json()["subscription_id"]
    assert bob.get(f"/v2/queues/{queue_name}/subscriptions").json()["subscriptions"] == []
    assert bob.get(f"/v2/queues/{queue_name}/subscriptions/{sid}").status_code == 404


def test_unknown_v2_paths_are_404(api):
    response = api.get("/v2/nothing-here")
    assert response.status_code == 404
    assert "title" in response.json()
