"""Claims: create (ttl, grace, limit), get, update, delete; claimed messages and dead letters."""

import time

import pytest
from zaqarclient.queues.v2 import claim as claim_api
from zaqarclient.transport import errors

from zaqar_helpers import MESSAGE_KEYS, assert_error, message_id


def test_claim_answers_201_with_messages_and_a_location(api, queue_name):
    ids = api.post_messages(queue_name, [{"ttl": 300, "body": i} for i in range(3)])
    response = api.claim(queue_name, ttl=60, grace=60, limit=2)
    assert response.status_code == 201
    location = response.headers["Location"]
    prefix = f"/v2/queues/{queue_name}/claims/"
    assert location.startswith(prefix)
    claim_id = location[len(prefix) :]
    document = response.json()
    assert set(document) == {"messages"}
    messages = document["messages"]
    assert [m["id"] for m in messages] == ids[:2]
    for message in messages:
        assert set(message) <= MESSAGE_KEYS
        assert message["href"] == (
            f"/v2/queues/{queue_name}/messages/{message['id']}?claim_id={claim_id}"
        )
        assert message["ttl"] == 300


def test_client_claim_reads_the_claim_id_from_the_hrefs(client, api, queue_name):
    api.post_messages(queue_name, [{"body": i} for i in range(3)])
    claim = client.queue(queue_name).claim(ttl=60, grace=60, limit=2)
    assert claim.id
    claimed = list(claim)
    assert [m.body for m in claimed] == [0, 1]
    assert all(m.claim_id == claim.id for m in claimed)


def test_claim_of_an_empty_queue_is_204(client, api, queue_name):
    api.put(f"/v2/queues/{queue_name}")
    response = api.claim(queue_name)
    assert response.status_code == 204
    assert response.content == b""
    claim = client.queue(queue_name).claim(ttl=60, grace=60)
    assert claim.id is None
    assert list(claim) == []


def test_claim_of_a_queue_never_created_is_204(api, queue_name):
    assert api.claim(queue_name).status_code == 204


def test_claim_takes_10_messages_by_default(api, queue_name):
    api.post_messages(queue_name, [{"body": i} for i in range(12)])
    response = api.post(f"/v2/queues/{queue_name}/claims", json_body={"ttl": 60, "grace": 60})
    assert len(response.json()["messages"]) == 10


def test_claim_without_a_body_uses_ttl_300_and_grace_60(api, queue_name):
    api.post_messages(queue_name, [{"body": 1}])
    response = api.post(f"/v2/queues/{queue_name}/claims")
    assert response.status_code == 201
    claim = api.get(response.headers["Location"]).json()
    assert claim["ttl"] == 300


def test_claim_with_null_ttl_is_400(api, queue_name):
    # What the client sends for queue.claim() without ttl and grace.
    api.post_messages(queue_name, [{"body": 1}])
    response = api.post(
        f"/v2/queues/{queue_name}/claims", json_body={"ttl": None, "grace": None}
    )
    assert_error(
        response, 400, "Invalid request body", 'The value of the "ttl" field must be a int.'
    )


def test_claim_with_only_a_ttl_uses_the_default_grace(api, queue_name):
    api.post_messages(queue_name, [{"body": 1}])
    response = api.post(f"/v2/queues/{queue_name}/claims", json_body={"ttl": 90})
    assert response.status_code == 201
    assert api.get(response.headers["Location"]).json()["ttl"] == 90


@pytest.mark.parametrize(
    ("body", "params", "description"),
    [
        (
            {"ttl": 59, "grace": 60},
            None,
            "The TTL for a claim may not exceed 43200 seconds, and must be at least 60 seconds long.",
        ),
        (
            {"ttl": 43201, "grace": 60},
            None,
            "The TTL for a claim may not exceed 43200 seconds, and must be at least 60 seconds long.",
        ),
        (
            {"ttl": 60, "grace": 59},
            None,
            "The grace for a claim may not exceed 43200 seconds, and must be at least 60 seconds "
            "long.",
        ),
        (
            {"ttl": 60, "grace": 43201},
            None,
            "The grace for a claim may not exceed 43200 seconds, and must be at least 60 seconds "
            "long.",
        ),
        ({"ttl": 60, "grace": 60}, {"limit": 21}, "Limit must be at least 1 and may not be greater than 20."),
        ({"ttl": 60, "grace": 60}, {"limit": 0}, "Limit must be at least 1 and may not be greater than 20."),
    ],
    ids=["ttl-59", "ttl-43201", "grace-59", "grace-43201", "limit-21", "limit-0"],
)
def test_claim_limits_are_400(api, queue_name, body, params, description):
    api.post_messages(queue_name, [{"body": 1}])
    response = api.post(f"/v2/queues/{queue_name}/claims", json_body=body, params=params)
    assert_error(response, 400, "Invalid API request", description)


def test_claim_ttl_must_be_an_integer(api, queue_name):
    api.post_messages(queue_name, [{"body": 1}])
    response = api.post(
        f"/v2/queues/{queue_name}/claims", json_body={"ttl": "60", "grace": 60}
    )
    assert_error(
        response, 400, "Invalid request body", 'The value of the "ttl" field must be a int.'
    )


def test_claimed_messages_go_to_no_other_claim(api, queue_name):
    api.post_messages(queue_name, [{"body": i} for i in range(3)])
    first = api.claim(queue_name, limit=2).json()["messages"]
    second = api.claim(queue_name, limit=2).json()["messages"]
    assert [m["body"] for m in first] == [0, 1]
    assert [m["body"] for m in second] == [2]
    assert api.claim(queue_name).status_code == 204


def test_get_claim_shows_ttl_age_href_and_messages(api, queue_name):
    api.post_messages(queue_name, [{"body": "a"}, {"body": "b"}])
    created = api.claim(queue_name, ttl=120, grace=60)
    location = created.headers["Location"]
    claim_id = location.rsplit("/", 1)[1]
    response = api.get(location)
    assert response.status_code == 200
    document = response.json()
    assert set(document) <= {"ttl", "age", "href", "messages", "grace"}
    assert document["ttl"] == 120
    assert isinstance(document["age"], int) and 0 <= document["age"] <= 5
    assert document["href"] == location
    assert [m["body"] for m in document["messages"]] == ["a", "b"]
    assert all(m["href"].endswith(f"?claim_id={claim_id}") for m in document["messages"])


def test_client_claim_by_id_loads_it(client, api, queue_name):
    api.post_messages(queue_name, [{"body": "a"}])
    claim_id = api.claim(queue_name, ttl=90).headers["Location"].rsplit("/", 1)[1]
    claim = claim_api.Claim(client.queue(queue_name), id=claim_id)
    assert claim.ttl == 90
    assert isinstance(claim.age, int)
    assert [m.body for m in claim] == ["a"]


def test_get_of_a_missing_claim_is_404(api, project, queue_name):
    api.put(f"/v2/queues/{queue_name}")
    response = api.get(f"/v2/queues/{queue_name}/claims/no-such-claim")
    assert_error(
        response,
        404,
        "Not found",
        f"Claim no-such-claim does not exist in queue {queue_name} for project {project}",
    )


def test_update_claim_renews_its_ttl(client, api, queue_name):
    api.post_messages(queue_name, [{"body": "a"}])
    claim = client.queue(queue_name).claim(ttl=60, grace=60)
    claim.update(ttl=600, grace=120)
    document = api.get(f"/v2/queues/{queue_name}/claims/{claim.id}").json()
    assert document["ttl"] == 600
    assert document["age"] <= 2


def test_update_claim_answers_204(api, queue_name):
    api.post_messages(queue_name, [{"body": "a"}])
    location = api.claim(queue_name).headers["Location"]
    response = api.patch(location, json_body={"ttl": 120, "grace": 60})
    assert response.status_code == 204
    assert response.content == b""


def test_update_claim_ttl_limits_are_400(api, queue_name):
    api.post_messages(queue_name, [{"body": "a"}])
    location = api.claim(queue_name).headers["Location"]
    assert_error(
        api.patch(location, json_body={"ttl": 10}),
        400,
        "Invalid API request",
        "The TTL for a claim may not exceed 43200 seconds, and must be at least 60 seconds long.",
    )


def test_update_of_a_missing_claim_is_404(api, project, queue_name):
    api.put(f"/v2/queues/{queue_name}")
    response = api.patch(
        f"/v2/queues/{queue_name}/claims/no-such-claim", json_body={"ttl": 120}
    )
    assert_error(
        response,
        404,
        "Not found",
        f"Claim no-such-claim does not exist in queue {queue_name} for project {project}",
    )


def test_delete_claim_releases_its_messages(client, api, other_api, queue_name):
    api.post_messages(queue_name, [{"body": "a"}])
    claim = client.queue(queue_name).claim(ttl=60, grace=60)
    claim.delete()
    listed = other_api.get(f"/v2/queues/{queue_name}/messages").json()["messages"]
    assert [m["body"] for m in listed] == ["a"]
    assert listed[0]["href"].endswith(f"/messages/{listed[0]['id']}")  # no claim_id any more
    assert api.get(f"/v2/queues/{queue_name}/claims/{claim.id}").status_code == 404
    assert api.claim(queue_name).status_code == 201


def test_delete_of_a_missing_claim_is_204(api, queue_name):
    response = api.delete(f"/v2/queues/{queue_name}/claims/no-such-claim")
    assert response.status_code == 204


def test_claim_extends_a_message_that_would_expire_first(api, queue_name):
    api.post_messages(queue_name, [{"ttl": 60, "body": "short"}, {"ttl": 3600, "body": "long"}])
    messages = api.claim(queue_name, ttl=120, grace=60).json()["messages"]
    # A message that would expire before the claim does lives on for the claim's ttl + grace.
    assert {m["body"]: m["ttl"] for m in messages} == {"short": 180, "long": 3600}


def _dead_letter_setup(api, queue_name):
    dead = queue_name + "-dead"
    api.put(
        f"/v2/queues/{queue_name}",
        json_body={
            "_max_claim_count": 1,
            "_dead_letter_queue": dead,
            "_dead_letter_queue_messages_ttl": 120,
        },
    )
    [mid] = api.post_messages(queue_name, [{"ttl": 3600, "body": "poison"}])
    return dead, mid


def _assert_moved_to_dead_letters(client, api, queue_name, dead, mid):
    # The next claim finds the message at its limit: it moves, and nothing is claimed.
    assert api.claim(queue_name).status_code == 204
    assert api.get(f"/v2/queues/{queue_name}/stats").json()["messages"]["total"] == 0
    [moved] = list(client.queue(dead).messages(echo=True))
    assert (moved.id, moved.body, moved.ttl) == (mid, "poison", 120)


# Zaqar's MongoDB driver forgets a message's claim count when its claim is deleted (only an
# expired claim keeps it); Tenax counts every claim, released or expired.
@pytest.mark.tenax_only
def test_message_claimed_max_claim_count_times_goes_to_the_dead_letter_queue(
    client, api, queue_name
):
    dead, mid = _dead_letter_setup(api, queue_name)
    first = api.claim(queue_name)
    assert first.status_code == 201
    api.delete(first.headers["Location"])
    _assert_moved_to_dead_letters(client, api, queue_name, dead, mid)


@pytest.mark.slow
def test_message_whose_claims_expired_max_claim_count_times_goes_to_the_dead_letter_queue(
    client, api, queue_name
):
    dead, mid = _dead_letter_setup(api, queue_name)
    assert api.claim(queue_name, ttl=60, grace=60).status_code == 201
    time.sleep(61.5)
    _assert_moved_to_dead_letters(client, api, queue_name, dead, mid)


@pytest.mark.slow
def test_expired_claim_frees_its_messages(api, other_api, queue_name):
    api.post_messages(queue_name, [{"body": "a"}])
    location = api.claim(queue_name, ttl=60, grace=60).headers["Location"]
    time.sleep(61.5)
    assert api.get(location).status_code == 404
    listed = other_api.get(f"/v2/queues/{queue_name}/messages").json()["messages"]
    assert [m["body"] for m in listed] == ["a"]
    assert api.claim(queue_name).status_code == 201


def test_client_raises_not_found_for_a_missing_claim(client, api, queue_name):
    api.put(f"/v2/queues/{queue_name}")
    claim = claim_api.Claim(client.queue(queue_name), id="no-such-claim")
    with pytest.raises(errors.ResourceNotFound):
        list(claim)


def test_message_ids_in_claims_match_the_posted_ones(api, queue_name):
    ids = api.post_messages(queue_name, [{"body": 1}])
    [message] = api.claim(queue_name).json()["messages"]
    assert message_id(message["href"]) == ids[0] == message["id"]


def test_encrypted_queue_hands_out_its_messages_as_posted(client, queue_name):
    """`_enable_encrypt_messages: True` (set through the client): the queue's messages are stored
    encrypted; claims, gets and pops give the bodies back as they were posted."""
    queue = client.queue(queue_name, force_create=True)
    queue.metadata(new_meta={"_enable_encrypt_messages": True})
    assert queue.metadata(force_reload=True)["_enable_encrypt_messages"] is True
    bodies = [{"card": "4111 1111 1111 1111", "cvv": 737}, "a plain string", [1, {"x": None}]]
    queue.post([{"body": body, "ttl": 300} for body in bodies])
    claim = queue.claim(ttl=60, grace=60, limit=2)
    claimed = list(claim)
    assert [m.body for m in claimed] == bodies[:2]
    assert queue.message(claimed[0].id).body == bodies[0]
    [popped] = queue.pop(count=1)
    assert popped.body == bodies[2]
    for message in claimed:
        message.delete()
    assert list(queue.messages(echo=True)) == []
