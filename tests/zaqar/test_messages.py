"""Messages: post, list (echo, include_claimed, paging), get one or several, delete, pop."""

import time

import pytest
from zaqarclient.transport import errors

from zaqar_helpers import MESSAGE_KEYS, assert_error, message_id


def bodies(messages):
    return [message.body for message in messages]


# -- post -------------------------------------------------------------------------------------


def test_post_answers_201_with_hrefs_and_a_location_of_ids(api, queue_name):
    response = api.post(
        f"/v2/queues/{queue_name}/messages",
        json_body={"messages": [{"ttl": 300, "body": {"a": 1}}, {"body": "two"}]},
    )
    assert response.status_code == 201
    hrefs = response.json()["resources"]
    assert len(hrefs) == 2
    prefix = f"/v2/queues/{queue_name}/messages/"
    assert all(href.startswith(prefix) and "?" not in href for href in hrefs)
    ids = [href[len(prefix) :] for href in hrefs]
    assert len(set(ids)) == 2
    assert response.headers["Location"] == f"/v2/queues/{queue_name}/messages?ids={','.join(ids)}"


def test_post_one_message_through_the_client(client, queue_name):
    queue = client.queue(queue_name)
    result = queue.post({"body": {"event": "one"}, "ttl": 120})
    [href] = result["resources"]
    message = queue.message(message_id(href))
    assert message.body == {"event": "one"}
    assert message.ttl == 120
    assert message.href == href


def test_post_batch_keeps_order(client, queue_name):
    queue = client.queue(queue_name)
    queue.post([{"body": i, "ttl": 60} for i in range(5)])
    assert bodies(queue.messages(echo=True)) == [0, 1, 2, 3, 4]


def test_bodies_may_be_any_json_value(client, queue_name):
    values = [{"k": [1, {"x": None}]}, [1, 2], "text", 3.5, True, None]
    queue = client.queue(queue_name)
    queue.post([{"body": value} for value in values])
    assert bodies(queue.messages(echo=True, limit=10)) == values


def test_message_ttl_defaults_to_3600(client, queue_name):
    queue = client.queue(queue_name)
    queue.post({"body": "default"})
    [message] = list(queue.messages(echo=True))
    assert message.ttl == 3600


def test_post_with_more_than_20_messages_is_accepted(api, queue_name):
    ids = api.post_messages(queue_name, [{"body": i} for i in range(25)])
    assert len(ids) == 25


@pytest.mark.parametrize(
    ("document", "title", "description"),
    [
        ({"messages": []}, "Invalid API request", "No messages to enqueu."),
        ({"other": []}, "Invalid API request", "No messages were found in the request body."),
        ([{"body": 1}], "Invalid API request", "No messages were found in the request body."),
        ({"messages": [{"ttl": 60}]}, "Invalid request body", 'Missing "body" field.'),
        (
            {"messages": [{"ttl": "60", "body": 1}]},
            "Invalid request body",
            'The value of the "ttl" field must be a int.',
        ),
        (
            {"messages": [{"ttl": 59, "body": 1}]},
            "Invalid API request",
            "The TTL for a message may not exceed 1209600 seconds, and must be at least 60 "
            "seconds long.",
        ),
        (
            {"messages": [{"ttl": 1209601, "body": 1}]},
            "Invalid API request",
            "The TTL for a message may not exceed 1209600 seconds, and must be at least 60 "
            "seconds long.",
        ),
        ({"messages": {"body": 1}}, "Invalid request body", "Document type not supported."),
    ],
    ids=[
        "empty-list",
        "no-messages-key",
        "bare-array",
        "missing-body",
        "ttl-not-int",
        "ttl-too-small",
        "ttl-too-big",
        "messages-not-array",
    ],
)
def test_invalid_posts_are_400(api, queue_name, document, title, description):
    response = api.post(f"/v2/queues/{queue_name}/messages", json_body=document)
    assert_error(response, 400, title, description)


def test_post_of_unparsable_json_is_400(api, queue_name):
    response = api.post(f"/v2/queues/{queue_name}/messages", data="{not json")
    assert_error(response, 400, "Invalid request body", "Request body could not be parsed.")


def test_post_over_256_kib_is_400(api, queue_name):
    response = api.post(
        f"/v2/queues/{queue_name}/messages",
        json_body={"messages": [{"ttl": 60, "body": "x" * 262144}]},
    )
    assert_error(
        response,
        400,
        "Invalid API request",
        "Message collection size is too large. Max size 262144",
    )


def test_queue_max_messages_post_size_lowers_the_limit(api, queue_name):
    api.put(f"/v2/queues/{queue_name}", json_body={"_max_messages_post_size": 1000})
    response = api.post(
        f"/v2/queues/{queue_name}/messages",
        json_body={"messages": [{"ttl": 60, "body": "x" * 2000}]},
    )
    assert_error(
        response,
        400,
        "Invalid API request",
        "Message collection size is too large. The max size for current queue is 1000. It is "
        "calculated by max size = min(max_messages_post_size_config: 262144, "
        "max_messages_post_size_queue: 1000).",
    )
    assert api.post_messages(queue_name, [{"ttl": 60, "body": "x" * 100}])


def test_client_raises_malformed_request_for_a_400(client, queue_name):
    with pytest.raises(errors.MalformedRequest):
        client.queue(queue_name).post({"body": 1, "ttl": 10})


# -- list -------------------------------------------------------------------------------------


def test_list_hides_a_clients_own_messages_unless_echo(client, other_client, queue_name):
    client.queue(queue_name).post([{"body": "mine"}])
    assert list(client.queue(queue_name).messages()) == []
    assert bodies(client.queue(queue_name).messages(echo=True)) == ["mine"]
    assert bodies(other_client.queue(queue_name).messages()) == ["mine"]


def test_echo_compares_client_ids_as_uuids(api, base_url, project, queue_name):
    from zaqar_helpers import RawApi

    dashed = RawApi(base_url, project, "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11")
    dashless = RawApi(base_url, project, "3E5C6B3A1F0E4A519D3B2B9C0A9F7E11")
    dashed.post_messages(queue_name, [{"body": 1}])
    listed = dashless.get(f"/v2/queues/{queue_name}/messages").json()
    assert listed == {"messages": [], "links": []}


def test_list_items_have_exactly_zaqars_message_keys(api, other_api, queue_name):
    [mid] = api.post_messages(queue_name, [{"ttl": 300, "body": {"a": 1}}])
    body = other_api.get(f"/v2/queues/{queue_name}/messages").json()
    [message] = body["messages"]
    assert message == {
        "id": mid,
        "href": f"/v2/queues/{queue_name}/messages/{mid}",
        "ttl": 300,
        "age": message["age"],
        "body": {"a": 1},
    }
    assert isinstance(message["age"], int) and 0 <= message["age"] <= 5


def test_list_pages_follow_next_links(client, api, queue_name):
    api.post_messages(queue_name, [{"body": i} for i in range(5)])
    first = api.get(
        f"/v2/queues/{queue_name}/messages", params={"limit": 2, "echo": "true"}
    ).json()
    assert [m["body"] for m in first["messages"]] == [0, 1]
    [link] = first["links"]
    assert link["rel"] == "next"
    assert link["href"].startswith(f"/v2/queues/{queue_name}/messages?")
    assert "limit=2" in link["href"] and "echo=true" in link["href"] and "marker=" in link["href"]
    second = api.get(link["href"]).json()
    assert [m["body"] for m in second["messages"]] == [2, 3]

    queue = client.queue(queue_name)
    assert bodies(queue.messages(limit=2, echo=True)) == [0, 1]
    assert bodies(queue.messages(limit=2, echo=True).stream()) == [0, 1, 2, 3, 4]


def test_list_default_page_is_10_messages(api, other_api, queue_name):
    api.post_messages(queue_name, [{"body": i} for i in range(12)])
    assert len(other_api.get(f"/v2/queues/{queue_name}/messages").json()["messages"]) == 10


def test_list_after_the_last_message_is_empty_without_links(api, queue_name):
    api.post_messages(queue_name, [{"body": 1}])
    first = api.get(f"/v2/queues/{queue_name}/messages", params={"echo": "true"}).json()
    after = api.get(first["links"][0]["href"]).json()
    assert after == {"messages": [], "links": []}


def test_list_of_a_queue_never_created_is_empty(api, queue_name):
    response = api.get(f"/v2/queues/{queue_name}/messages")
    assert response.status_code == 200
    assert response.json() == {"messages": [], "links": []}


def test_claimed_messages_are_listed_only_with_include_claimed(client, api, queue_name):
    api.post_messages(queue_name, [{"body": "claimed"}, {"body": "free"}])
    claim = api.claim(queue_name, limit=1).json()
    [claimed] = claim["messages"]
    queue = client.queue(queue_name)
    assert bodies(queue.messages(echo=True)) == ["free"]
    listed = list(queue.messages(echo=True, include_claimed=True))
    assert bodies(listed) == ["claimed", "free"]
    assert listed[0].href == claimed["href"]
    assert listed[0].href.endswith("?claim_id=" + claimed["href"].rsplit("=", 1)[1])


@pytest.mark.parametrize(
    ("params", "title", "description"),
    [
        ({"limit": 21}, "Invalid API request", "Limit must be at least 1 and may not be greater than 20."),
        ({"limit": 0}, "Invalid API request", "Limit must be at least 1 and may not be greater than 20."),
        ({"limit": "ten"}, "Invalid parameter", 'The "limit" parameter is invalid. The value must be an integer.'),
        (
            {"echo": "maybe"},
            "Invalid parameter",
            'The "echo" parameter is invalid. The value of the parameter must be "true" or "false".',
        ),
    ],
    ids=["limit-21", "limit-0", "limit-not-int", "echo-not-bool"],
)
def test_invalid_list_parameters_are_400(api, queue_name, params, title, description):
    response = api.get(f"/v2/queues/{queue_name}/messages", params=params)
    assert_error(response, 400, title, description)


def test_boolean_parameters_accept_python_spellings(api, queue_name):
    api.post_messages(queue_name, [{"body": 1}])
    for value in ("True", "true", "1", "yes"):
        listed = api.get(f"/v2/queues/{queue_name}/messages", params={"echo": value}).json()
        assert len(listed["messages"]) == 1, value
    for value in ("False", "false", "0", "no"):
        listed = api.get(f"/v2/queues/{queue_name}/messages", params={"echo": value}).json()
        assert listed["messages"] == [], value


def test_message_age_counts_seconds(api, other_api, queue_name):
    [mid] = api.post_messages(queue_name, [{"body": 1}])
    time.sleep(1.3)
    message = api.get(f"/v2/queues/{queue_name}/messages/{mid}").json()
    assert 1 <= message["age"] <= 3


# -- get one or several -----------------------------------------------------------------------


def test_get_one_message(client, api, queue_name):
    [mid] = api.post_messages(queue_name, [{"ttl": 200, "body": ["x"]}])
    response = api.get(f"/v2/queues/{queue_name}/messages/{mid}")
    assert response.status_code == 200
    document = response.json()
    assert set(document) <= MESSAGE_KEYS
    assert document["id"] == mid
    assert document["href"] == f"/v2/queues/{queue_name}/messages/{mid}"
    assert (document["ttl"], document["body"]) == (200, ["x"])
    message = client.queue(queue_name).message(mid)
    assert (message.id, message.ttl, message.body) == (mid, 200, ["x"])
    assert message.claim_id is None


def test_get_of_a_claimed_message_has_the_claim_in_its_href(api, queue_name):
    [mid] = api.post_messages(queue_name, [{"body": 1}])
    claim_href = api.claim(queue_name).headers["Location"]
    claim_id = claim_href.rsplit("/", 1)[1]
    document = api.get(f"/v2/queues/{queue_name}/messages/{mid}").json()
    assert document["href"] == f"/v2/queues/{queue_name}/messages/{mid}?claim_id={claim_id}"


def test_get_of_a_missing_message_is_404(api, project, queue_name):
    api.post_messages(queue_name, [{"body": 1}])
    response = api.get(f"/v2/queues/{queue_name}/messages/nonexistent")
    assert_error(
        response,
        404,
        "Not found",
        f"Message nonexistent does not exist in queue {queue_name} for project {project}",
    )


def test_get_several_messages_by_ids(client, api, queue_name):
    ids = api.post_messages(queue_name, [{"body": i} for i in range(3)])
    # A literal comma: Zaqar splits the raw query string, so "%2C" would be part of one id.
    response = api.get(f"/v2/queues/{queue_name}/messages?ids={ids[0]},{ids[2]}")
    assert response.status_code == 200
    document = response.json()
    assert set(document) == {"messages"}
    assert sorted(m["body"] for m in document["messages"]) == [0, 2]
    got = client.queue(queue_name).messages(ids[0], ids[2])
    assert sorted(m.id for m in got) == sorted([ids[0], ids[2]])


def test_get_several_skips_unknown_ids(api, queue_name):
    [mid] = api.post_messages(queue_name, [{"body": 1}])
    document = api.get(f"/v2/queues/{queue_name}/messages?ids={mid},unknown").json()
    assert [m["id"] for m in document["messages"]] == [mid]


def test_ids_may_be_repeated_or_comma_separated(api, queue_name):
    # python-zaqarclient sends ?ids=a&ids=b (a list in `requests` params); curl users send a,b.
    ids = api.post_messages(queue_name, [{"body": i} for i in range(4)])
    repeated = api.get(f"/v2/queues/{queue_name}/messages", params={"ids": ids[:2]}).json()
    assert sorted(m["id"] for m in repeated["messages"]) == sorted(ids[:2])
    mixed = api.get(f"/v2/queues/{queue_name}/messages?ids={ids[0]},{ids[1]}&ids={ids[2]}").json()
    assert sorted(m["id"] for m in mixed["messages"]) == sorted(ids[:3])
    deleted = api.delete(f"/v2/queues/{queue_name}/messages", params={"ids": ids[:2]})
    assert deleted.status_code == 204
    assert api.delete(f"/v2/queues/{queue_name}/messages?ids={ids[2]},{ids[3]}").status_code == 204
    assert api.get(f"/v2/queues/{queue_name}/stats").json()["messages"]["total"] == 0


def test_get_several_with_no_match_is_404(client, api, project, queue_name):
    api.post_messages(queue_name, [{"body": 1}])
    response = api.get(f"/v2/queues/{queue_name}/messages", params={"ids": "unknown"})
    assert_error(
        response,
        404,
        "Not found",
        f"No messages with IDs: ['unknown'] found in the queue {queue_name} for project {project}.",
    )
    with pytest.raises(errors.ResourceNotFound):
        list(client.queue(queue_name).messages("unknown"))


def test_get_more_than_20_ids_is_400(api, queue_name):
    ids = ",".join(f"id{i}" for i in range(21))
    response = api.get(f"/v2/queues/{queue_name}/messages?ids={ids}")
    assert_error(
        response,
        400,
        "Invalid API request",
        "Limit must be at least 1 and may not be greater than 20.",
    )


# -- delete -----------------------------------------------------------------------------------


def test_delete_one_message(client, api, queue_name):
    ids = api.post_messages(queue_name, [{"body": "a"}, {"body": "b"}])
    queue = client.queue(queue_name)
    queue.message(ids[0]).delete()
    assert bodies(queue.messages(echo=True)) == ["b"]
    with pytest.raises(errors.ResourceNotFound):
        queue.message(ids[0])


def test_delete_answers_204_even_for_a_missing_message(api, queue_name):
    response = api.delete(f"/v2/queues/{queue_name}/messages/nonexistent")
    assert response.status_code == 204
    assert response.content == b""


def test_delete_several_messages(client, api, queue_name):
    ids = api.post_messages(queue_name, [{"body": i} for i in range(3)])
    queue = client.queue(queue_name)
    queue.delete_messages(ids[0], ids[1])
    assert bodies(queue.messages(echo=True)) == [2]
    response = api.delete(f"/v2/queues/{queue_name}/messages", params={"ids": ids[2]})
    assert response.status_code == 204
    assert queue.stats["messages"]["total"] == 0


def test_delete_several_removes_claimed_messages_too(api, queue_name):
    ids = api.post_messages(queue_name, [{"body": 1}])
    api.claim(queue_name)
    assert api.delete(f"/v2/queues/{queue_name}/messages", params={"ids": ids[0]}).status_code == 204
    assert api.get(f"/v2/queues/{queue_name}/stats").json()["messages"]["total"] == 0


def test_delete_of_a_claimed_message_without_its_claim_is_403(api, queue_name):
    [mid] = api.post_messages(queue_name, [{"body": 1}])
    api.claim(queue_name)
    response = api.delete(f"/v2/queues/{queue_name}/messages/{mid}")
    assert_error(
        response,
        403,
        "Unable to delete",
        "This message is claimed; it cannot be deleted without a valid claim ID.",
    )


def test_delete_of_a_claimed_message_with_its_claim_succeeds(client, api, queue_name):
    api.post_messages(queue_name, [{"body": "work"}])
    queue = client.queue(queue_name)
    claim = queue.claim(ttl=60, grace=60)
    [message] = list(claim)
    assert message.claim_id == claim.id
    message.delete()  # DELETE ...?claim_id=<claim>
    assert queue.stats["messages"]["total"] == 0


def test_delete_with_an_unknown_claim_is_400(api, queue_name):
    [mid] = api.post_messages(queue_name, [{"body": 1}])
    api.claim(queue_name)
    response = api.delete(
        f"/v2/queues/{queue_name}/messages/{mid}", params={"claim_id": "no-such-claim"}
    )
    assert_error(
        response, 400, "Unable to delete", "The specified claim does not exist or has expired."
    )


def test_delete_with_a_claim_of_an_unclaimed_message_is_400(api, queue_name):
    ids = api.post_messages(queue_name, [{"body": "claimed"}, {"body": "free"}])
    claim_id = api.claim(queue_name, limit=1).headers["Location"].rsplit("/", 1)[1]
    response = api.delete(
        f"/v2/queues/{queue_name}/messages/{ids[1]}", params={"claim_id": claim_id}
    )
    assert_error(
        response,
        400,
        "Unable to delete",
        "A claim was specified, but the message is not currently claimed.",
    )


@pytest.mark.parametrize(
    ("query", "description"),
    [
        (
            "",
            'The request should have either "ids" or "pop" parameter in the request, to be able '
            "to delete.",
        ),
        ("?ids=a&pop=1", "pop and id params cannot be present together in the delete request."),
        ("?pop=0", "Pop value must be at least 1 and may not be greater than 20."),
        ("?pop=21", "Pop value must be at least 1 and may not be greater than 20."),
        (
            "?ids=" + ",".join(f"id{i}" for i in range(21)),
            "ids parameter should have at least 1 and not greater than 20 values.",
        ),
    ],
    ids=["neither", "both", "pop-0", "pop-21", "ids-21"],
)
def test_invalid_bulk_deletes_are_400(api, queue_name, query, description):
    response = api.delete(f"/v2/queues/{queue_name}/messages{query}")
    assert_error(response, 400, "Invalid API request", description)


# -- pop --------------------------------------------------------------------------------------


def test_pop_returns_and_removes_messages(client, api, queue_name):
    api.post_messages(queue_name, [{"body": i} for i in range(3)])
    popped = list(client.queue(queue_name).pop(2))
    assert len(popped) == 2
    assert all(message.id for message in popped)
    assert client.queue(queue_name).stats["messages"]["total"] == 1


def test_pop_answers_200_with_zaqar_message_objects(api, queue_name):
    [mid] = api.post_messages(queue_name, [{"ttl": 300, "body": {"p": 1}}])
    response = api.delete(f"/v2/queues/{queue_name}/messages", params={"pop": 1})
    assert response.status_code == 200
    [message] = response.json()["messages"]
    assert set(message) <= MESSAGE_KEYS
    assert {"id", "ttl", "age", "body"} <= set(message)
    assert (message["id"], message["ttl"], message["body"]) == (mid, 300, {"p": 1})


def test_pop_of_an_empty_queue_is_an_empty_list(api, queue_name):
    response = api.delete(f"/v2/queues/{queue_name}/messages", params={"pop": 5})
    assert response.status_code == 200
    assert response.json() == {"messages": []}


def test_pop_skips_claimed_messages(api, queue_name):
    api.post_messages(queue_name, [{"body": "claimed"}, {"body": "free"}])
    api.claim(queue_name, limit=1)
    popped = api.delete(f"/v2/queues/{queue_name}/messages", params={"pop": 5}).json()
    assert [m["body"] for m in popped["messages"]] == ["free"]


# -- queue default delay ----------------------------------------------------------------------


def test_default_message_delay_hides_new_messages_until_it_passes(api, other_api, queue_name):
    # Zaqar counts whole seconds: a 2 s delay hides the message for at least 1 s.
    api.put(f"/v2/queues/{queue_name}", json_body={"_default_message_delay": 2})
    posted = time.monotonic()
    api.post_messages(queue_name, [{"body": "later"}])
    assert other_api.get(f"/v2/queues/{queue_name}/messages").json()["messages"] == []
    assert api.claim(queue_name).status_code == 204
    assert time.monotonic() - posted < 1, "too slow to observe the delay"
    time.sleep(2.3)
    listed = other_api.get(f"/v2/queues/{queue_name}/messages").json()["messages"]
    assert [m["body"] for m in listed] == ["later"]


# -- expiry -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_message_disappears_after_its_ttl(api, queue_name):
    [mid] = api.post_messages(queue_name, [{"ttl": 60, "body": "short"}])
    time.sleep(61.5)
    assert api.get(f"/v2/queues/{queue_name}/messages/{mid}").status_code == 404
    assert api.get(f"/v2/queues/{queue_name}/stats").json()["messages"]["total"] == 0
