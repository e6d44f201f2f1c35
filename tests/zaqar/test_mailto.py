"""Email (`mailto:`) subscribers, through a real SMTP server (aiosmtpd, `mailbox` in conftest).

Zaqar's `mailto` task mails each message's notification as JSON text, to the subscriber's
address, with the subject of its query. The suite's server is started with `--smtp-url`
pointing at the mailbox; each test mails a recipient of its own.

Tenax-only: a Zaqar needs its own `[notification] smtp_*` setup, and retries no mail.
"""

import json
import uuid

import pytest
from zaqarclient.transport import errors

from zaqar_helpers import assert_error, wait_until

FIRST_MAIL_TIMEOUT = 10.0

pytestmark = pytest.mark.tenax_only


@pytest.fixture
def recipient():
    return f"ops-{uuid.uuid4().hex[:10]}@example.com"


def mailto(recipient, query="subject=New%20order&from=queue@example.com"):
    return f"mailto:{recipient}?{query}"


def test_a_message_is_mailed_as_its_notification(client, mailbox, queue_name, recipient):
    created = client.subscription(queue_name, subscriber=mailto(recipient), ttl=3600)
    assert created.subscriber == mailto(recipient)
    client.queue(queue_name).post({"ttl": 300, "body": {"order": 7}})
    [mail] = mailbox.wait_for(recipient, 1, FIRST_MAIL_TIMEOUT)
    assert mail.sender == "queue@example.com"
    assert mail.message["To"] == recipient
    assert mail.message["Subject"] == "New order"
    assert mail.message.get_content_type() == "text/plain"
    assert json.loads(mail.text()) == {
        "ttl": 300,
        "body": {"order": 7},
        "queue_name": queue_name,
        "Message_Type": "Notification",
    }


def test_subject_and_sender_may_come_from_the_options(client, mailbox, queue_name, recipient):
    client.subscription(
        queue_name,
        subscriber=f"mailto:{recipient}",
        ttl=3600,
        options={"subject": "From the options", "from": "Orders <orders@example.com>"},
    )
    client.queue(queue_name).post({"ttl": 60, "body": "hello"})
    [mail] = mailbox.wait_for(recipient, 1, FIRST_MAIL_TIMEOUT)
    assert mail.message["Subject"] == "From the options"
    assert mail.sender == "orders@example.com"


def test_a_refused_mail_is_retried_by_the_policy(client, api, mailbox, queue_name, recipient):
    # Refused for now twice (451, 421), then accepted: the policy's two immediate retries.
    mailbox.refuse(recipient, [451, 421])
    created = client.subscription(
        queue_name,
        subscriber=mailto(recipient),
        ttl=3600,
        options={
            "_retry_policy": {
                "retries_with_no_delay": 2,
                "minimum_delay_retries": 0,
                "minimum_delay": 1,
                "maximum_delay": 11,
                "maximum_delay_retries": 0,
            }
        },
    )
    client.queue(queue_name).post({"ttl": 60, "body": "retried"})
    [mail] = mailbox.wait_for(recipient, 1, FIRST_MAIL_TIMEOUT)
    assert json.loads(mail.text())["body"] == "retried"
    assert [code for to, code in mailbox.refused if to == recipient] == [451, 421]
    # The attempts are logged as a webhook's are (the native API of the same subscription).
    [delivery] = api.get(f"/api/subscriptions/{created.id}/deliveries").json()["deliveries"]
    attempts_path = f"/api/deliveries/{delivery['id']}/attempts"
    # The last attempt's record is written in the commit that ends it.
    assert wait_until(lambda: len(api.get(attempts_path).json()["attempts"]) == 3, 5.0)
    attempts = api.get(attempts_path).json()["attempts"]
    assert [a["result"] for a in attempts] == ["retryable", "retryable", "delivered"]


def test_a_mail_refused_for_good_is_not_sent_again(client, mailbox, queue_name, recipient):
    mailbox.refuse(recipient, [550])
    client.subscription(queue_name, subscriber=mailto(recipient), ttl=3600)
    client.queue(queue_name).post({"ttl": 60, "body": "lost"})
    assert wait_until(lambda: (recipient, 550) in mailbox.refused, FIRST_MAIL_TIMEOUT)
    client.queue(queue_name).post({"ttl": 60, "body": "kept"})
    [mail] = mailbox.wait_for(recipient, 1, FIRST_MAIL_TIMEOUT)
    assert json.loads(mail.text())["body"] == "kept"
    assert [code for to, code in mailbox.refused if to == recipient] == [550]


@pytest.mark.parametrize(
    ("subscriber", "rule"),
    [
        ("mailto:not-an-address?from=queue@example.com", "not an email address"),
        ("mailto:ops@example.com", "sender"),
        ("mailto:ops@example.com?from=nobody", "not an email address"),
    ],
)
def test_bad_mailto_subscribers_are_refused(client, api, queue_name, subscriber, rule):
    error = assert_error(
        api.post(f"/v2/queues/{queue_name}/subscriptions", json_body={"subscriber": subscriber}),
        400,
        "Invalid API request",
    )
    assert rule in error["description"]
    with pytest.raises(errors.MalformedRequest):
        client.subscription(queue_name, subscriber=subscriber, ttl=3600)
