"""GET /v2/ (the home document), /v2/ping and /v2/health."""

import pytest


def test_ping_is_true_through_the_client(client):
    assert client.ping() is True


def test_ping_answers_204_without_body(api):
    response = api.get("/v2/ping")
    assert response.status_code == 204
    assert response.content == b""
    assert api.head("/v2/ping").status_code == 204


def test_home_document_is_json_home_listing_v2_resources(client, api):
    document = client.homedoc()
    resources = document["resources"]
    for rel in (
        "rel/queues",
        "rel/queue",
        "rel/queue_stats",
        "rel/queue_purge",
        "rel/messages",
        "rel/post_messages",
        "rel/messages_delete",
        "rel/message_delete",
        "rel/message_get",
        "rel/claim",
        "rel/post_claim",
        "rel/patch_claim",
        "rel/delete_claim",
        "rel/subscriptions_get",
        "rel/subscriptions_post",
        "rel/subscription",
        "rel/subscription_patch",
        "rel/ping",
    ):
        assert rel in resources, rel
    assert resources["rel/queues"]["href-template"] == "/v2/queues{?marker,limit,detailed}"
    assert resources["rel/messages"]["href-template"] == (
        "/v2/queues/{queue_name}/messages{?marker,limit,echo,include_claimed}"
    )
    assert resources["rel/post_claim"]["href-template"] == "/v2/queues/{queue_name}/claims{?limit}"
    for rel, resource in resources.items():
        template = resource.get("href-template", resource.get("href"))
        assert template.startswith("/v2/"), (rel, template)
        assert "allow" in resource["hints"], rel

    response = api.get("/v2/")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json-home")


@pytest.mark.tenax_only  # Zaqar serves /v2/health to admins only (403 by default policy)
def test_health_reports_reachable_storage_and_message_volume(client):
    health = client.health()
    assert health["storage_reachable"] is True
    volume = health["message_volume"]
    assert set(volume) >= {"free", "claimed", "total"}
    assert all(isinstance(volume[key], int) for key in ("free", "claimed", "total"))
