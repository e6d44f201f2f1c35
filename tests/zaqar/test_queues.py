"""Queues: create, exists, metadata (GET and JSON-patch), list with paging, stats, purge, delete."""

import re

import pytest
from zaqarclient.transport import errors

from zaqar_helpers import DEFAULT_QUEUE_METADATA, JSON_PATCH, assert_error

ISO_SECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def names(queue_iterator):
    return [queue.name for queue in queue_iterator]


# -- create -----------------------------------------------------------------------------------


def test_put_creates_with_201_then_answers_204(api, queue_name):
    first = api.put(f"/v2/queues/{queue_name}")
    assert first.status_code == 201
    assert first.headers["Location"] == f"/v2/queues/{queue_name}"
    again = api.put(f"/v2/queues/{queue_name}")
    assert again.status_code == 204
    assert again.headers["Location"] == f"/v2/queues/{queue_name}"


def test_force_create_makes_the_queue_listed(client, queue_name):
    client.queue(queue_name, force_create=True)
    queues, _ = client.queues()
    assert names(queues) == [queue_name]


def test_queue_object_alone_sends_nothing_and_a_post_creates_the_queue(client, queue_name):
    queue = client.queue(queue_name)  # auto_create=True only builds the object
    assert names(client.queues()[0]) == []
    queue.post({"body": "first", "ttl": 60})
    assert names(client.queues()[0]) == [queue_name]


def test_put_with_metadata_stores_it(api, client, queue_name):
    response = api.put(f"/v2/queues/{queue_name}", json_body={"color": "blue", "n": 3})
    assert response.status_code == 201
    metadata = client.queue(queue_name, auto_create=False).metadata()
    assert metadata == {**DEFAULT_QUEUE_METADATA, "color": "blue", "n": 3}


def test_put_with_a_non_object_body_is_400(api, queue_name):
    assert_error(
        api.put(f"/v2/queues/{queue_name}", json_body=[1]),
        400,
        "Invalid request body",
        "Document type not supported.",
    )
    assert_error(
        api.put(f"/v2/queues/{queue_name}", data="{not json"),
        400,
        "Invalid request body",
        "Request body could not be parsed.",
    )


@pytest.mark.parametrize(
    "name",
    ["has space", "a" * 65, "caf\u00e9", "semi;colon"],
    ids=["space", "65-chars", "non-ascii", "semicolon"],
)
def test_invalid_queue_names_are_400(api, name):
    assert_error(
        api.put(f"/v2/queues/{name}"),
        400,
        "Invalid queue identification",
        "The format of the submitted queue name or project id is not valid.",
    )


def test_queue_names_may_use_letters_digits_dash_underscore_and_dot(api):
    for name in ("a", "A-b_c.9", "x" * 64):
        assert api.put(f"/v2/queues/{name}").status_code in (201, 204), name


def test_queue_metadata_over_64_kib_is_400(api, queue_name):
    assert_error(
        api.put(f"/v2/queues/{queue_name}", json_body={"big": "x" * 65536}),
        400,
        "Invalid API request",
        "Queue metadata is too large. Max size: 65536",
    )


@pytest.mark.parametrize(
    ("metadata", "description"),
    [
        (
            {"_default_message_ttl": 59},
            "_default_message_ttl can not exceed 1209600 seconds, and must be at least 60 "
            "seconds long.",
        ),
        (
            {"_default_message_ttl": "3600"},
            "_default_message_ttl must be integer.",
        ),
        (
            {"_max_messages_post_size": 0},
            "_max_messages_post_size can not exceed 262144,  and must be at least greater than 0.",
        ),
        (
            {"_max_messages_post_size": 262145},
            "_max_messages_post_size can not exceed 262144,  and must be at least greater than 0.",
        ),
        (
            {"_default_message_delay": 901},
            "The TTL can not exceed 900 seconds, and must be at least 0 seconds long.",
        ),
        ({"_max_claim_count": "x"}, "_max_claim_count must be integer."),
        (
            {"_dead_letter_queue_messages_ttl": 59},
            "The TTL for a message may not exceed 1209600 seconds, and must be at least 60 "
            "seconds long.",
        ),
        ({"_retry_policy": "linear"}, "retry_policy must be a dict."),
        (
            {"_retry_policy": {"retry_backoff_function": "fibonacci"}},
            "invalid retry_backoff_function.",
        ),
    ],
    ids=[
        "ttl-too-small",
        "ttl-not-int",
        "post-size-zero",
        "post-size-too-big",
        "delay-too-big",
        "claim-count-not-int",
        "dlq-ttl-too-small",
        "retry-policy-not-object",
        "retry-policy-bad-function",
    ],
)
def test_invalid_reserved_metadata_is_400(api, queue_name, metadata, description):
    assert_error(
        api.put(f"/v2/queues/{queue_name}", json_body=metadata),
        400,
        "Invalid API request",
        description,
    )


# -- exists -----------------------------------------------------------------------------------


def test_exists_is_true_for_a_created_queue(client, queue_name):
    queue = client.queue(queue_name, force_create=True)
    assert queue.exists() is True


@pytest.mark.tenax_only  # Zaqar v2 has no HEAD on a queue (405), so its client always says True
def test_exists_is_false_for_a_queue_never_created(client, api, queue_name):
    assert client.queue(queue_name, auto_create=False).exists() is False
    assert api.head(f"/v2/queues/{queue_name}").status_code == 404
    api.put(f"/v2/queues/{queue_name}")
    assert api.head(f"/v2/queues/{queue_name}").status_code == 204


# -- metadata ---------------------------------------------------------------------------------


def test_new_queue_metadata_is_zaqars_reserved_defaults(client, queue_name):
    queue = client.queue(queue_name, force_create=True)
    assert queue.metadata() == DEFAULT_QUEUE_METADATA


def test_metadata_of_a_queue_never_created_is_the_defaults(api, queue_name):
    response = api.get(f"/v2/queues/{queue_name}")
    assert response.status_code == 200
    assert response.json() == DEFAULT_QUEUE_METADATA


def test_client_metadata_update_adds_replaces_and_removes_keys(client, queue_name):
    queue = client.queue(queue_name, force_create=True)
    updated = queue.metadata(new_meta={"a": 1, "b": {"nested": True}})
    assert updated == {**DEFAULT_QUEUE_METADATA, "a": 1, "b": {"nested": True}}
    # Replaces a, removes b (and asks to remove every reserved key it was shown).
    updated = queue.metadata(new_meta={"a": 2})
    assert updated == {**DEFAULT_QUEUE_METADATA, "a": 2}
    assert queue.metadata(force_reload=True) == {**DEFAULT_QUEUE_METADATA, "a": 2}


def test_client_metadata_update_sets_a_reserved_key(client, queue_name):
    queue = client.queue(queue_name, force_create=True)
    queue.metadata(new_meta={"_default_message_ttl": 120})
    assert queue.metadata(force_reload=True)["_default_message_ttl"] == 120
    queue.post({"body": "uses the queue's default ttl"})
    [message] = list(queue.messages(echo=True))
    assert message.ttl == 120


def test_client_metadata_with_empty_dict_clears_user_keys(client, queue_name):
    queue = client.queue(queue_name, force_create=True)
    queue.metadata(new_meta={"a": 1, "_default_message_ttl": 120})
    assert queue.metadata(new_meta={}) == DEFAULT_QUEUE_METADATA


def test_patch_answers_200_with_the_whole_metadata(api, queue_name):
    api.put(f"/v2/queues/{queue_name}", json_body={"a": 1})
    response = api.patch_metadata(
        queue_name,
        [
            {"op": "replace", "path": "/metadata/a", "value": 2},
            {"op": "add", "path": "/metadata/b", "value": [1, 2]},
        ],
    )
    assert response.status_code == 200
    assert response.json() == {**DEFAULT_QUEUE_METADATA, "a": 2, "b": [1, 2]}


def test_patch_remove_of_a_stored_reserved_key_restores_its_default(api, queue_name):
    api.put(f"/v2/queues/{queue_name}", json_body={"_default_message_ttl": 120})
    response = api.patch_metadata(
        queue_name, [{"op": "remove", "path": "/metadata/_default_message_ttl"}]
    )
    assert response.status_code == 200
    assert response.json()["_default_message_ttl"] == 3600


def test_patch_replace_of_an_absent_reserved_key_sets_it(api, queue_name):
    api.put(f"/v2/queues/{queue_name}")
    response = api.patch_metadata(
        queue_name, [{"op": "replace", "path": "/metadata/_max_claim_count", "value": 5}]
    )
    assert response.status_code == 200
    assert response.json()["_max_claim_count"] == 5


def test_patch_needs_the_json_patch_media_type(api, queue_name):
    api.put(f"/v2/queues/{queue_name}")
    response = api.patch(
        f"/v2/queues/{queue_name}",
        json_body=[{"op": "add", "path": "/metadata/a", "value": 1}],
        headers={"Content-Type": "application/json"},
    )
    assert_error(
        response,
        415,
        "415 Unsupported Media Type",
        f"Accepted media type for PATCH: {{'Accept-Patch': '{JSON_PATCH}'}}.",
    )


@pytest.mark.parametrize(
    ("changes", "status", "title", "description"),
    [
        (
            [{"op": "replace", "path": "/metadata/absent", "value": 1}],
            409,
            "Resource conflict",
            "Can't replace non-existent object absent.",
        ),
        (
            [{"op": "remove", "path": "/metadata/absent"}],
            409,
            "Resource conflict",
            "Can't remove non-existent object absent.",
        ),
        (
            [{"op": "move", "path": "/metadata/a"}],
            400,
            "Invalid request body",
            "Invalid operation: `move`. It must be one of the following: add, remove, replace.",
        ),
        (
            [{"path": "/metadata/a", "value": 1}],
            400,
            "Invalid request body",
            "Unable to find `op` in JSON Schema change. It must be one of the following: add, "
            "remove, replace.",
        ),
        (
            [{"op": "add", "path": "/color", "value": 1}],
            400,
            "Invalid request body",
            "Invalid JSON pointer for this resource: '/color, e.g /metadata/key'",
        ),
        (
            [{"op": "add", "path": "/other/a", "value": 1}],
            400,
            "Invalid request body",
            "The root of path must be metadata, e.g /metadata/key.",
        ),
        (
            [{"op": "add", "path": "/metadata/a/b", "value": 1}],
            400,
            "Invalid request body",
            "Invalid JSON pointer for this resource: '/metadata/a/b, e.g /metadata/key'",
        ),
        (
            [{"op": "add", "path": "/metadata/a"}],
            400,
            "Invalid request body",
            'Operation "add" requires a member named "value".',
        ),
        (
            [{"op": "add", "path": "/metadata/_default_message_ttl", "value": 30}],
            400,
            "Invalid request body",
            "_default_message_ttl can not exceed 1209600 seconds, and must be at least 60 "
            "seconds long.",
        ),
    ],
    ids=[
        "replace-absent",
        "remove-absent",
        "unknown-op",
        "missing-op",
        "path-too-short",
        "path-not-metadata",
        "path-too-deep",
        "add-without-value",
        "invalid-reserved-value",
    ],
)
def test_patch_errors(api, queue_name, changes, status, title, description):
    api.put(f"/v2/queues/{queue_name}", json_body={"a": 1})
    assert_error(api.patch_metadata(queue_name, changes), status, title, description)
    # Nothing was applied.
    assert api.get(f"/v2/queues/{queue_name}").json() == {**DEFAULT_QUEUE_METADATA, "a": 1}


def test_patch_with_an_empty_body_is_400(api, queue_name):
    api.put(f"/v2/queues/{queue_name}")
    response = api.patch(
        f"/v2/queues/{queue_name}", data="", headers={"Content-Type": JSON_PATCH}
    )
    assert_error(
        response, 400, "Invalid request body", "PATCH body could not be empty for update."
    )


def test_patch_of_a_queue_never_created_is_404(api, project, queue_name):
    response = api.patch_metadata(queue_name, [{"op": "add", "path": "/metadata/a", "value": 1}])
    assert_error(
        response,
        404,
        "Not found",
        f"Queue {queue_name} does not exist for project {project}",
    )


# -- list -------------------------------------------------------------------------------------


def test_list_of_an_empty_project_has_no_queues_and_no_links(api, client):
    response = api.get("/v2/queues")
    assert response.status_code == 200
    assert response.json() == {"queues": [], "links": []}
    queues, count = client.queues()
    assert list(queues) == [] and count is None


def test_list_items_have_name_and_href_sorted_by_name(api):
    for name in ("charlie", "alpha", "bravo"):
        api.put(f"/v2/queues/{name}")
    body = api.get("/v2/queues").json()
    assert body["queues"] == [
        {"name": "alpha", "href": "/v2/queues/alpha"},
        {"name": "bravo", "href": "/v2/queues/bravo"},
        {"name": "charlie", "href": "/v2/queues/charlie"},
    ]
    assert body["links"] == [{"rel": "next", "href": "/v2/queues?marker=charlie"}]


def test_list_pages_with_limit_and_marker(api, client):
    created = [f"page-{i}" for i in range(5)]
    for name in created:
        api.put(f"/v2/queues/{name}")
    first = api.get("/v2/queues", params={"limit": 2}).json()
    assert [q["name"] for q in first["queues"]] == ["page-0", "page-1"]
    [link] = first["links"]
    assert link["rel"] == "next"
    assert link["href"].startswith("/v2/queues?")
    assert "limit=2" in link["href"] and "marker=page-1" in link["href"]
    second = api.get(link["href"]).json()
    assert [q["name"] for q in second["queues"]] == ["page-2", "page-3"]
    after_last = api.get("/v2/queues", params={"marker": "page-4"}).json()
    assert after_last == {"queues": [], "links": []}

    queues, _ = client.queues(limit=2)
    assert names(queues) == ["page-0", "page-1"]
    queues, _ = client.queues(limit=2)
    assert names(queues.stream()) == created


def test_detailed_list_includes_metadata_with_defaults(api, client, queue_name):
    api.put(f"/v2/queues/{queue_name}", json_body={"team": "ops"})
    body = api.get("/v2/queues", params={"detailed": "true"}).json()
    assert body["queues"] == [
        {
            "name": queue_name,
            "href": f"/v2/queues/{queue_name}",
            "metadata": {**DEFAULT_QUEUE_METADATA, "team": "ops"},
        }
    ]
    queues, _ = client.queues(detailed=True)
    [queue] = list(queues)
    assert queue.metadata()["team"] == "ops"


def test_list_with_count_reports_the_number_of_queues(api, client):
    for i in range(3):
        api.put(f"/v2/queues/counted-{i}")
    queues, count = client.queues(with_count=True, limit=1)
    assert count == 3
    assert len(list(queues)) == 1
    body = api.get("/v2/queues", params={"with_count": "true"}).json()
    assert body["count"] == 3


@pytest.mark.parametrize("limit", [0, 21, -1])
def test_list_limit_outside_1_to_20_is_400(api, limit):
    assert_error(
        api.get("/v2/queues", params={"limit": limit}),
        400,
        "Invalid API request",
        "Limit must be at least 1 and no greater than 20.",
    )


def test_list_default_page_is_10_queues(api):
    for i in range(12):
        api.put(f"/v2/queues/many-{i:02d}")
    assert len(api.get("/v2/queues").json()["queues"]) == 10


# -- stats ------------------------------------------------------------------------------------


def test_stats_of_a_queue_never_created_are_zero(client, api, queue_name):
    expected = {"messages": {"claimed": 0, "free": 0, "total": 0}}
    assert client.queue(queue_name, auto_create=False).stats == expected
    response = api.get(f"/v2/queues/{queue_name}/stats")
    assert response.status_code == 200
    assert response.json() == expected


def test_stats_count_free_and_claimed_messages_with_oldest_and_newest(api, queue_name):
    ids = api.post_messages(queue_name, [{"ttl": 300, "body": i} for i in range(3)])
    assert api.claim(queue_name, limit=1).status_code == 201
    stats = api.get(f"/v2/queues/{queue_name}/stats").json()["messages"]
    assert (stats["claimed"], stats["free"], stats["total"]) == (1, 2, 3)
    assert stats["oldest"]["href"] == f"/v2/queues/{queue_name}/messages/{ids[0]}"
    assert stats["newest"]["href"] == f"/v2/queues/{queue_name}/messages/{ids[2]}"
    for end in ("oldest", "newest"):
        assert isinstance(stats[end]["age"], int) and stats[end]["age"] >= 0
        assert ISO_SECONDS.match(stats[end]["created"]), stats[end]


def test_stats_through_the_client(client, queue_name):
    queue = client.queue(queue_name)
    queue.post([{"body": 1}, {"body": 2}])
    stats = queue.stats["messages"]
    assert (stats["free"], stats["claimed"], stats["total"]) == (2, 0, 2)


# -- purge ------------------------------------------------------------------------------------


def test_purge_removes_messages_and_subscriptions(client, api, queue_name):
    queue = client.queue(queue_name)
    queue.post([{"body": 1}, {"body": 2}])
    client.subscription(queue_name, subscriber="http://127.0.0.1:9/purged", ttl=3600)
    queue.purge()
    assert queue.stats["messages"]["total"] == 0
    assert list(client.subscriptions(queue_name)) == []
    assert names(client.queues()[0]) == [queue_name]  # the queue itself stays


def test_purge_of_messages_only_keeps_subscriptions(client, queue_name):
    queue = client.queue(queue_name)
    queue.post({"body": 1})
    client.subscription(queue_name, subscriber="http://127.0.0.1:9/kept", ttl=3600)
    queue.purge(resource_types=["messages"])
    assert queue.stats["messages"]["total"] == 0
    assert [s.subscriber for s in client.subscriptions(queue_name)] == ["http://127.0.0.1:9/kept"]


def test_purge_answers_204(api, queue_name):
    api.post_messages(queue_name, [{"body": 1}])
    assert api.post(f"/v2/queues/{queue_name}/purge").status_code == 204


@pytest.mark.parametrize(
    ("body", "description"),
    [
        ({}, 'Post body must contain key "resource_types".'),
        ({"resource_types": ["claims"]}, None),
    ],
    ids=["missing-resource-types", "unknown-resource-type"],
)
def test_purge_with_invalid_resource_types_is_400(api, queue_name, body, description):
    error = assert_error(
        api.post(f"/v2/queues/{queue_name}/purge", json_body=body),
        400,
        "Invalid API request",
        description,
    )
    if description is None:
        assert error["description"].startswith("Resource types must be a sub set of")


# -- delete -----------------------------------------------------------------------------------


def test_delete_removes_the_queue_and_its_messages(client, api, queue_name):
    queue = client.queue(queue_name)
    queue.post({"body": "gone"})
    queue.delete()
    assert names(client.queues()[0]) == []
    assert api.get(f"/v2/queues/{queue_name}/messages", params={"echo": "true"}).json() == {
        "messages": [],
        "links": [],
    }
    assert api.get(f"/v2/queues/{queue_name}/stats").json()["messages"]["total"] == 0


def test_delete_answers_204_even_for_a_queue_never_created(api, queue_name):
    assert api.delete(f"/v2/queues/{queue_name}").status_code == 204


def test_client_raises_for_a_404(client, queue_name):
    queue = client.queue(queue_name)
    with pytest.raises(errors.ResourceNotFound):
        queue.message("no-such-message")
