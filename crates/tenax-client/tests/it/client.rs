//! The client against the real server: every group of endpoints, typed answers and typed
//! errors naming the field.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use common::{ADMIN, Server, eventually, wait_for_status};
use futures_util::{StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tenax_client::{
    AttemptResult, BreakerState, Client, DeadSelection, DeliveryFilter, Error, Failure, JobFilter,
    JobStatus, Missed, NewJob, NewSchedule, NewToken, OnDuplicate, Outcome, Overlap, PolicySource,
    QueueUpdate, ReplayDead, ReplayDeliveries, RetryBudgetSettings, Role, RotateSecret,
    SchedulePreview, SubscriptionSettings, Take, TickCounts,
};

use crate::common;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Email {
    to: String,
    attempts: u32,
}

fn email(to: &str) -> Email {
    Email {
        to: to.to_owned(),
        attempts: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_with_every_option_and_inspect_the_jobs() {
    let server = Server::start(&[]).await;
    let client = server.client();
    client.health().await.expect("the server is up");

    let sns = json!({"healthyRetryPolicy": {"minDelayTarget": 1, "maxDelayTarget": 5,
        "numRetries": 3, "backoffFunction": "linear"}});
    let first = client
        .enqueue(
            &NewJob::new("emails", "email.send")
                .payload(email("ada@example.com"))
                .priority(7)
                .delay(Duration::from_secs(3600))
                .policy(sns)
                .retry_limit(2)
                .unique_key("welcome-ada"),
        )
        .await
        .expect("enqueued");
    assert!(first.created);
    assert_eq!(first.status, JobStatus::Scheduled);
    assert!(first.run_at > SystemTime::now() + Duration::from_secs(3500));

    // The same key: the existing job, or a typed refusal naming the key.
    let again = NewJob::new("emails", "email.send").unique_key("welcome-ada");
    let existing = client
        .enqueue(&again.clone().on_duplicate(OnDuplicate::Existing))
        .await
        .expect("the existing job");
    assert_eq!((existing.id, existing.created), (first.id, false));
    let refused = client.enqueue(&again).await.expect_err("a duplicate");
    assert!(refused.is_duplicate(), "{refused}");
    assert_eq!(refused.status(), Some(409));
    assert_eq!(refused.field(), Some("unique_key"));

    let at = SystemTime::now() + Duration::from_secs(7200);
    let later = client
        .enqueue(&NewJob::new("emails", "report").run_at(at))
        .await
        .expect("enqueued");
    let job = client.get_job(first.id).await.expect("the job");
    assert_eq!(job.kind, "email.send");
    assert_eq!(job.priority, 7);
    assert_eq!(
        job.payload::<Email>().expect("an email"),
        email("ada@example.com")
    );
    assert_eq!(job.unique_key.as_deref(), Some("welcome-ada"));
    let policy = job.policy.expect("its own policy");
    assert_eq!(
        policy["type"], "phased",
        "stored in the native spelling: {policy}"
    );
    assert_eq!(job.attempt, 1);
    let report = client.get_job(later.id).await.expect("the job");
    let off = report
        .run_at
        .duration_since(at)
        .unwrap_or_else(|e| e.duration());
    assert!(off < Duration::from_millis(2), "run_at is kept to the ms");
    assert_eq!(report.payload.get(), "null");

    // Pages, and every page.
    let ids = client
        .enqueue_many(
            &(0..5)
                .map(|i| NewJob::new("pages", "p").payload(i))
                .collect::<Vec<_>>(),
        )
        .await
        .expect("a batch");
    let page = client
        .list_jobs(&JobFilter::new().queue("pages").limit(2))
        .await
        .expect("a page");
    assert_eq!(page.jobs.len(), 2);
    let next = page.next_after.expect("more");
    let page = client
        .list_jobs(&JobFilter::new().queue("pages").limit(2).after(next))
        .await
        .expect("a page");
    assert_eq!(page.jobs[0].id, ids[2].id);
    let all: Vec<u64> = client
        .all_jobs(JobFilter::new().queue("pages").limit(2))
        .map_ok(|j| j.id)
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(all, ids.iter().map(|e| e.id).collect::<Vec<_>>());
    let scheduled = client
        .list_jobs(&JobFilter::new().status(JobStatus::Scheduled).kind("report"))
        .await
        .expect("a page");
    assert_eq!(scheduled.jobs.len(), 1);

    let stats = client.stats().await.expect("stats");
    assert_eq!(stats.queue("pages").ready, 5);
    assert_eq!(stats.queue("emails").scheduled, 2);
    assert_eq!(stats.totals.unfinished(), 7);

    client.delete_job(ids[0].id).await.expect("deleted");
    let gone = client.get_job(ids[0].id).await.expect_err("gone");
    assert!(gone.is_not_found(), "{gone}");
    assert!(gone.request_id().is_some(), "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_field_and_a_bad_batch_stores_nothing() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let jobs = vec![
        NewJob::new("ok", "a").payload(json!(1)),
        NewJob::new("not a queue", "a").payload(json!(2)),
    ];
    let error = client.enqueue_many(&jobs).await.expect_err("refused");
    match &error {
        Error::Api {
            status,
            code,
            field,
            message,
            ..
        } => {
            assert_eq!((*status, code.as_str()), (400, "invalid"));
            assert_eq!(field.as_deref(), Some("jobs[1].queue"));
            assert!(message.contains("characters"), "{message}");
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    assert!(error.is_invalid() && !error.is_transient());
    assert!(error.to_string().contains("jobs[1].queue"), "{error}");
    assert_eq!(client.stats().await.expect("stats").totals.unfinished(), 0);

    let error = client
        .enqueue(
            &NewJob::new("q", "a").policy(json!({"type": "phased", "min_delay": "9s",
                "max_delay": "5s", "num_retries": 3, "function": "linear"})),
        )
        .await
        .expect_err("refused");
    assert_eq!(error.field(), Some("policy.max_delay"), "{error}");
    let error = client
        .take(&Take::queue("q").max(5000))
        .await
        .expect_err("refused");
    assert_eq!(error.field(), Some("max"));
    let error = client
        .stream(&Take::queue("q").wait(Duration::from_secs(1)))
        .await
        .expect_err("refused");
    assert_eq!(error.field(), Some("wait"));

    // Unreachable: a transport error, apart from the server's refusals.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port");
    let nowhere = Client::builder()
        .url(format!("http://{closed}"))
        .timeout(Duration::from_secs(2))
        .build()
        .expect("a client");
    let error = nowhere.stats().await.expect_err("nobody listens");
    assert!(matches!(error, Error::Transport(_)), "{error:?}");
    assert!(error.is_transient() && error.status().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_heartbeat_complete_and_fail_by_hand() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let policy = json!({"type": "list", "delays": ["10m", "10m", "10m", "10m"]});
    // The first job carries a trace context, to its record and to its taker.
    const TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let enqueued = client
        .enqueue_many(
            &(0..8)
                .map(|i| NewJob::new("work", "w").payload(i).policy(policy.clone()))
                .enumerate()
                .map(|(i, job)| if i == 0 { job.traceparent(TRACE) } else { job })
                .collect::<Vec<_>>(),
        )
        .await
        .expect("a batch");
    let ids: Vec<u64> = enqueued.iter().map(|e| e.id).collect();
    let record = client.get_job(ids[0]).await.expect("the job");
    assert_eq!(record.traceparent.as_deref(), Some(TRACE));

    // A long poll answers at once when a job is ready.
    let jobs = client
        .take(
            &Take::queue("work")
                .max(8)
                .lease(Duration::from_secs(5))
                .wait(Duration::from_secs(5)),
        )
        .await
        .expect("jobs");
    assert_eq!(jobs.len(), 8);
    assert_eq!(jobs[0].payload::<u32>().expect("a number"), 0);
    assert_eq!(jobs[0].traceparent.as_deref(), Some(TRACE));
    assert_eq!(jobs[1].traceparent, None);
    let by_id = |id: u64| jobs.iter().find(|j| j.id == id).expect("taken");

    let extended = client
        .heartbeat(by_id(ids[0]), Some(Duration::from_secs(60)))
        .await
        .expect("extended");
    assert!(extended.lease_expires_at > by_id(ids[0]).lease_expires_at);

    client.complete(by_id(ids[0])).await.expect("completed");
    let stale = client.complete(by_id(ids[0])).await.expect_err("twice");
    assert!(stale.is_not_in_flight() && stale.is_gone(), "{stale}");
    let stale = client
        .heartbeat(by_id(ids[0]), None)
        .await
        .expect_err("not held");
    assert!(stale.is_gone(), "{stale}");

    // Each outcome.
    let retried = client
        .fail(by_id(ids[1]), &Failure::new("SMTP timeout"))
        .await
        .expect("failed");
    assert_eq!(retried.status, JobStatus::Scheduled);
    assert_eq!(retried.delay(), Some(Duration::from_secs(600)));
    assert_eq!((retried.failures, retried.attempt), (1, Some(2)));
    let dead = client
        .fail(
            by_id(ids[2]),
            &Failure::new("no such mailbox")
                .outcome(Outcome::NotRetryable)
                .detail(json!({"code": 550})),
        )
        .await
        .expect("failed");
    assert!(dead.is_dead());
    let recorded = client.get_job(ids[2]).await.expect("the job");
    assert_eq!(recorded.errors[0].message, "no such mailbox");
    assert_eq!(recorded.errors[0].detail, Some(json!({"code": 550})));
    let retry_in = client
        .fail(
            by_id(ids[3]),
            &Failure::new("busy").outcome(Outcome::RetryIn(Duration::from_secs(42))),
        )
        .await
        .expect("failed");
    assert_eq!(retry_in.delay(), Some(Duration::from_secs(42)));
    let at = SystemTime::now() + Duration::from_secs(3600);
    let retry_at = client
        .fail(
            by_id(ids[4]),
            &Failure::new("later").outcome(Outcome::RetryAt(at)),
        )
        .await
        .expect("failed");
    let run_at = retry_at.run_at.expect("a run time");
    let off = run_at.duration_since(at).unwrap_or_else(|e| e.duration());
    assert!(off < Duration::from_millis(2));
    let snoozed = client
        .fail(by_id(ids[5]), &Failure::snooze(Duration::from_secs(30)))
        .await
        .expect("snoozed");
    assert_eq!(snoozed.failures, 0, "a snooze uses no attempt");
    assert_eq!(snoozed.delay(), Some(Duration::from_secs(30)));
    assert!(client.get_job(ids[5]).await.expect("job").errors.is_empty());

    // Many at once: one stale lease does not stop the others.
    let results = client
        .complete_many(&[
            by_id(ids[6]).lease(),
            by_id(ids[1]).lease(),
            by_id(ids[7]).lease(),
        ])
        .await
        .expect("results");
    assert_eq!(
        results.iter().map(|r| r.completed).collect::<Vec<_>>(),
        [true, false, true]
    );
    let why = results[1].error.as_ref().expect("a reason");
    assert_eq!(why.code, "not_in_flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_skips_keep_alives_and_closing_it_returns_its_jobs() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let mut stream = client
        .stream(&Take::queue("s").max(2).lease(Duration::from_secs(30)))
        .await
        .expect("a stream");
    // Nothing to take: only keep-alive lines come, and none of them is a job.
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while stream.keep_alives() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no keep-alive line came"
        );
        let next = tokio::time::timeout(Duration::from_millis(200), stream.next()).await;
        assert!(next.is_err(), "no job was enqueued: {next:?}");
    }
    let ids: Vec<u64> = client
        .enqueue_many(
            &(0..3)
                .map(|i| NewJob::new("s", "t").payload(i))
                .collect::<Vec<_>>(),
        )
        .await
        .expect("a batch")
        .iter()
        .map(|e| e.id)
        .collect();
    let first = stream.next().await.expect("a job").expect("a job");
    let second = stream.next().await.expect("a job").expect("a job");
    assert_eq!((first.id, second.id), (ids[0], ids[1]));
    // The stream holds two: acknowledge one to get the third.
    client.complete(&first).await.expect("completed");
    let third = stream.next().await.expect("a job").expect("a job");
    assert_eq!(third.id, ids[2]);
    drop(stream);
    for id in [ids[1], ids[2]] {
        let job = wait_for_status(&client, id, JobStatus::Ready).await;
        assert_eq!((job.attempt, job.failures), (1, 0), "no attempt used");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_jobs_queues_and_policies() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let ids: Vec<u64> = client
        .enqueue_many(
            &(0..3)
                .map(|i| NewJob::new("d", if i == 2 { "other" } else { "t" }).payload(i))
                .collect::<Vec<_>>(),
        )
        .await
        .expect("a batch")
        .iter()
        .map(|e| e.id)
        .collect();
    for job in client.take(&Take::queue("d").max(3)).await.expect("jobs") {
        client
            .fail(&job, &Failure::new("broken").outcome(Outcome::NotRetryable))
            .await
            .expect("dead");
    }
    let dead = client
        .list_dead(&JobFilter::new().queue("d"))
        .await
        .expect("dead jobs");
    assert_eq!(dead.jobs.len(), 3);
    assert!(dead.jobs.iter().all(|j| j.status == JobStatus::Dead));
    let every: Vec<_> = client
        .all_dead(JobFilter::new().queue("d").limit(1))
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(every.len(), 3);
    let replay = client
        .replay_dead(
            &ReplayDead::new(DeadSelection::ids([ids[0], 999_999]))
                .reset_attempts(true)
                .policy(json!({"type": "fixed", "delay": "1s", "retry_limit": 1})),
        )
        .await
        .expect("replayed");
    assert_eq!(replay.ids, [ids[0]]);
    assert_eq!(replay.skipped[0].id, 999_999);
    assert_eq!(
        client.get_job(ids[0]).await.expect("job").status,
        JobStatus::Ready
    );
    let deleted = client
        .delete_dead(&DeadSelection::queue("d").kind("other"))
        .await
        .expect("deleted");
    assert_eq!(deleted.ids, [ids[2]]);
    let refused = client
        .replay_dead(&DeadSelection::default().into())
        .await
        .expect_err("nothing selected");
    assert!(refused.is_invalid(), "{refused}");

    // Queues.
    let queue = client
        .update_queue(
            "d",
            &QueueUpdate::new()
                .policy(json!({"type": "list", "delays": ["1s"]}))
                .message_ttl(Duration::from_secs(3600)),
        )
        .await
        .expect("updated");
    assert_eq!(queue.policy.as_ref().expect("a policy")["type"], "list");
    assert_eq!(queue.message_ttl(), Some(Duration::from_secs(3600)));
    let paused = client.pause_queue("d").await.expect("paused");
    assert!(paused.paused);
    assert!(
        client
            .take(&Take::queue("d"))
            .await
            .expect("a take")
            .is_empty(),
        "a paused queue hands nothing out"
    );
    assert!(!client.resume_queue("d").await.expect("resumed").paused);
    let queue = client
        .update_queue(
            "d",
            &QueueUpdate::new().remove_policy().remove_message_ttl(),
        )
        .await
        .expect("updated");
    assert!(queue.policy.is_none() && queue.message_ttl().is_none());
    let limited = client
        .update_queue(
            "d",
            &QueueUpdate::new()
                .concurrency(4)
                .rate(100, Duration::from_secs(60)),
        )
        .await
        .expect("limited");
    assert_eq!(limited.concurrency, Some(4));
    let rate = limited.rate.expect("a rate limit");
    assert_eq!((rate.limit, rate.period_ms, rate.used), (100, 60_000, 0));
    let unlimited = client
        .update_queue("d", &QueueUpdate::new().remove_concurrency().remove_rate())
        .await
        .expect("unlimited");
    assert_eq!((unlimited.concurrency, unlimited.rate), (None, None));
    assert_eq!(client.get_queue("d").await.expect("a queue").counts.dead, 1);
    assert!(
        client
            .list_queues()
            .await
            .expect("queues")
            .iter()
            .any(|q| q.name == "d")
    );
    let error = client
        .update_queue("d", &QueueUpdate::new().policy(json!({"type": "nonsense"})))
        .await
        .expect_err("refused");
    assert_eq!(error.field(), Some("policy.type"), "{error}");
    // A queue that has never existed is not made by a change, unless it says so.
    let error = client.pause_queue("dd").await.expect_err("no such queue");
    assert!(error.is_not_found(), "{error}");
    assert!(error.to_string().contains("did you mean \"d\"?"), "{error}");
    let made = client
        .update_queue("dd", &QueueUpdate::new().paused(true).create())
        .await
        .expect("made");
    assert!(made.paused);

    // Policies.
    let preview = client
        .preview_policy(
            &json!({"type": "list", "delays": ["1s", "2s", "4s"]}),
            Some(2),
        )
        .await
        .expect("a preview");
    assert_eq!(preview.retry_count, 3);
    assert_eq!(preview.window(), Duration::from_secs(7));
    assert!(preview.truncated);
    assert_eq!(preview.retries[1].delay_ms, 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_and_deliveries() {
    let server = Server::start(&["--allow-private-endpoints"]).await;
    let client = server.client();
    // An endpoint where nobody listens: every delivery attempt fails.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port");
    let created = client
        .create_subscription(
            "orders",
            &SubscriptionSettings::endpoint(format!("http://{closed}/hooks"))
                .policy(json!({"type": "list", "delays": ["50ms"]}))
                .headers(BTreeMap::from([(
                    "X-Key".to_owned(),
                    "secret-value".to_owned(),
                )])),
        )
        .await
        .expect("subscribed");
    assert!(created.secret.starts_with("whsec_"), "shown once");
    assert_eq!(created.policy_source, PolicySource::Subscription);
    let shown = client.get_subscription(created.id).await.expect("shown");
    assert_eq!(shown.secret, "[redacted]");
    assert_eq!(shown.headers["X-Key"], "[redacted]");
    assert_eq!(
        client
            .list_queue_subscriptions("orders")
            .await
            .expect("listed")
            .len(),
        1
    );

    client
        .enqueue(&NewJob::new("orders", "order.paid").payload(json!({"order": 7})))
        .await
        .expect("enqueued");
    let delivery = eventually("a dead delivery", || {
        let client = client.clone();
        async move {
            let page = client
                .list_deliveries(created.id, &DeliveryFilter::new().status(JobStatus::Dead))
                .await
                .expect("deliveries");
            page.deliveries.into_iter().next()
        }
    })
    .await;
    // The status changes at once, the attempt log once written.
    let attempts = eventually("both attempts logged", || {
        let client = client.clone();
        async move {
            let full = client.get_delivery(delivery.id).await.expect("a delivery");
            full.attempts.filter(|a| a.len() == 2)
        }
    })
    .await;
    assert!(
        attempts
            .iter()
            .all(|a| a.result != AttemptResult::Delivered)
    );
    assert_eq!(
        client
            .delivery_attempts(delivery.id)
            .await
            .expect("attempts")
            .len(),
        2
    );
    let page = client
        .list_subscription_attempts(created.id, &DeliveryFilter::new().limit(10))
        .await
        .expect("attempts");
    assert_eq!(page.attempts.len(), 2);

    // A disabled subscription's replayed delivery waits.
    let disabled = client
        .disable_subscription(created.id)
        .await
        .expect("disabled");
    assert!(!disabled.enabled);
    let replayed = client
        .replay_delivery(delivery.id, &ReplayDeliveries::new().reset_attempts(true))
        .await
        .expect("replayed");
    assert_eq!(replayed, [delivery.id]);
    let again = client
        .replay_delivery(delivery.id, &ReplayDeliveries::new())
        .await
        .expect_err("not dead now");
    assert_eq!(again.code(), Some("not_dead"), "{again}");
    assert!(
        client
            .enable_subscription(created.id)
            .await
            .expect("enabled")
            .enabled
    );
    let none = client
        .replay_subscription(
            created.id,
            &ReplayDeliveries::new().since(SystemTime::now() + Duration::from_secs(60)),
        )
        .await
        .expect("a replay");
    assert!(none.is_empty());

    let updated = client
        .update_subscription(
            created.id,
            &SubscriptionSettings::changes()
                .throttle_per_second(5)
                .reset_policy(),
        )
        .await
        .expect("updated");
    assert_eq!(updated.throttle_per_second, Some(5));
    assert_eq!(updated.policy_source, PolicySource::Server);
    let rotated = client
        .rotate_subscription_secret(
            created.id,
            &RotateSecret::new().overlap(Duration::from_secs(60)),
        )
        .await
        .expect("rotated");
    assert!(rotated.secret.starts_with("whsec_") && rotated.secret != created.secret);
    assert!(rotated.previous_secret_until.is_some());
    let error = client
        .update_subscription(
            created.id,
            &SubscriptionSettings::changes().set_endpoint("ftp://x"),
        )
        .await
        .expect_err("refused");
    assert_eq!(error.field(), Some("endpoint"), "{error}");

    let deleted = client
        .delete_subscription(created.id)
        .await
        .expect("deleted");
    assert_eq!(deleted.deleted, created.id);
    assert!(
        client
            .list_subscriptions()
            .await
            .expect("listed")
            .is_empty()
    );
    let error = client
        .get_delivery(delivery.id)
        .await
        .expect_err("deleted with its subscription");
    assert!(error.is_not_found());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_roles_and_refusals() {
    let server = Server::start(&["--auth", "on", "--admin-token", ADMIN]).await;
    let anonymous = server.client();
    let error = anonymous.stats().await.expect_err("no token");
    assert!(error.is_unauthorized(), "{error}");
    assert_eq!(error.status(), Some(401));

    let admin = server.client_with(ADMIN);
    let producer = admin
        .create_token(&NewToken::new("producer", Role::Producer).queues(["mail.*"]))
        .await
        .expect("a token");
    assert!(producer.token.starts_with("tnx_"));
    assert!(!format!("{producer:?}").contains(&producer.token));
    let producer_client = server.client_with(&producer.token);
    producer_client
        .enqueue(&NewJob::new("mail.out", "m"))
        .await
        .expect("may enqueue in scope");
    let error = producer_client
        .enqueue(&NewJob::new("billing", "m"))
        .await
        .expect_err("out of scope");
    assert!(error.is_forbidden(), "{error}");
    let error = producer_client
        .take(&Take::queue("mail.out"))
        .await
        .expect_err("a producer may not take");
    assert!(error.is_forbidden(), "{error}");
    let tokens = admin.list_tokens().await.expect("tokens");
    assert!(
        tokens
            .iter()
            .any(|t| t.name == "producer" && t.role == Role::Producer)
    );
    admin.revoke_token(producer.info.id).await.expect("revoked");
    let error = producer_client.stats().await.expect_err("revoked");
    assert!(error.is_unauthorized());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_ca_file() {
    let dir = tempfile::tempdir().expect("a directory");
    let ca_key = rcgen::KeyPair::generate().expect("a key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tenax-client test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key).expect("a CA");
    let key = rcgen::KeyPair::generate().expect("a key");
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer).expect("a certificate");
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("written");
        path
    };
    let ca_file = write("ca.pem", ca.pem());
    let cert_file = write("cert.pem", cert.pem());
    let key_file = write("key.pem", key.serialize_pem());
    let server = Server::start_with_scheme(
        &[
            "--tls-cert",
            cert_file.to_str().expect("a path"),
            "--tls-key",
            key_file.to_str().expect("a path"),
        ],
        "https",
    )
    .await;
    let client = Client::builder()
        .url(&server.url)
        .ca_file(&ca_file)
        .build()
        .expect("a client");
    client
        .enqueue(&NewJob::new("tls", "t"))
        .await
        .expect("over https");
    let taken = client
        .take(&Take::queue("tls").wait(Duration::from_secs(2)))
        .await
        .expect("a take over https");
    assert_eq!(taken.len(), 1);
    let untrusting = Client::builder()
        .url(&server.url)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("a client");
    let error = untrusting.stats().await.expect_err("an unknown CA");
    assert!(matches!(error, Error::Transport(_)), "{error:?}");
    let missing = Client::builder()
        .url(&server.url)
        .ca_file(dir.path().join("missing.pem"))
        .build()
        .expect_err("no such file");
    assert!(matches!(missing, Error::Config(_)), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_made_ticked_paused_and_deleted() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let made = client
        .put_schedule(
            "nightly",
            &NewSchedule::new("30 2 * * *", "reports", "report")
                .timezone("Europe/Berlin")
                .payload(json!({"full": true}))
                .retry_limit(2)
                .overlap(Overlap::Skip),
        )
        .await
        .expect("made");
    assert_eq!(
        made.job.payload::<serde_json::Value>().expect("JSON"),
        json!({"full": true})
    );
    assert_eq!((made.job.retry_limit, made.job.priority), (Some(2), 0));
    assert_eq!((made.missed, made.overlap), (Missed::Skip, Overlap::Skip));
    assert!(made.next_tick.expect("a next tick") > SystemTime::now());
    assert_eq!(made.counts, TickCounts::default());
    assert!(!made.description.is_empty());

    let ticks = client
        .schedule_ticks("nightly", Some(3))
        .await
        .expect("ticks");
    assert_eq!(ticks.timezone, "Europe/Berlin");
    assert_eq!(ticks.ticks.len(), 3);
    assert!(ticks.ticks.windows(2).all(|w| w[0].at < w[1].at));
    // The spring-forward day of 2027: 02:30 does not exist, the tick moves to 03:00.
    let preview = client
        .preview_schedule(
            &SchedulePreview::new("30 2 * * *")
                .timezone("Europe/Berlin")
                .after(SystemTime::UNIX_EPOCH + Duration::from_secs(1_806_148_800))
                .count(2),
        )
        .await
        .expect("a preview");
    assert_eq!(preview.ticks[0].local, "2027-03-28T03:00:00+02:00");
    assert!(preview.ticks[0].shifted && !preview.ticks[1].shifted);

    assert!(
        client
            .pause_schedule("nightly")
            .await
            .expect("paused")
            .paused
    );
    assert!(
        !client
            .resume_schedule("nightly")
            .await
            .expect("resumed")
            .paused
    );
    assert_eq!(
        client
            .list_schedules()
            .await
            .expect("listed")
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["nightly"]
    );

    // Replaced by a schedule of every second: its first tick enqueues a job.
    let every_second = client
        .put_schedule(
            "nightly",
            &NewSchedule::new("* * * * * *", "reports", "report").missed(Missed::RunOnce),
        )
        .await
        .expect("replaced");
    assert_eq!(every_second.cron, "* * * * * *");
    let ticked = eventually("a tick's job", || {
        let client = client.clone();
        async move {
            let schedule = client.get_schedule("nightly").await.expect("the schedule");
            schedule.last_job.map(|job| (job, schedule))
        }
    })
    .await;
    let (job, schedule) = ticked;
    assert!(schedule.counts.enqueued >= 1 && schedule.last_tick.is_some());
    // The schedule may show its last job a moment before the job can be read.
    let job = eventually("the tick's job readable", || {
        let client = client.clone();
        async move { client.get_job(job).await.ok() }
    })
    .await;
    assert_eq!(job.queue, "reports");

    let error = client
        .put_schedule("bad", &NewSchedule::new("* * *", "q", "t"))
        .await
        .expect_err("refused");
    assert_eq!(error.field(), Some("cron"), "{error}");
    let error = client
        .put_schedule("no spaces", &NewSchedule::new("@daily", "q", "t"))
        .await
        .expect_err("refused");
    assert_eq!(error.field(), Some("name"), "{error}");
    client.delete_schedule("nightly").await.expect("deleted");
    let gone = client.get_schedule("nightly").await.expect_err("gone");
    assert!(gone.is_not_found(), "{gone}");
    let gone = client.delete_schedule("nightly").await.expect_err("gone");
    assert!(gone.is_not_found(), "{gone}");
}

/// The typed answers serialize back to the JSON the server sent, field for field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_serialize_back_to_the_api_json() {
    let server = Server::start(&["--allow-private-endpoints"]).await;
    let client = server.client();
    tenax_client::install_crypto_provider();
    #[allow(clippy::disallowed_methods)] // the provider is installed
    let http = reqwest::Client::new();
    let raw = |path: &str| {
        let request = http.get(format!("{}{path}", server.url));
        async move {
            request
                .send()
                .await
                .expect("an answer")
                .json::<serde_json::Value>()
                .await
                .expect("JSON")
        }
    };

    let policy = json!({"type": "list", "delays": ["10m"]});
    let job = client
        .enqueue(
            &NewJob::new("q", "t")
                .payload(json!({"n": 1}))
                .policy(policy)
                .unique_key("k"),
        )
        .await
        .expect("enqueued");
    let taken = client.take(&Take::queue("q")).await.expect("taken");
    client
        .fail(&taken[0], &Failure::new("no").detail(json!({"code": 1})))
        .await
        .expect("failed");
    client
        .update_queue("q", &QueueUpdate::new().rate(5, Duration::from_secs(60)))
        .await
        .expect("limited");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port");
    let subscription = client
        .create_subscription(
            "orders",
            // One attempt, then a retry far off: the delivery holds still once attempted.
            &SubscriptionSettings::endpoint(format!("http://{closed}/hooks"))
                .policy(json!({"type": "list", "delays": ["1h"]}))
                .retry_budget(RetryBudgetSettings::new(20, Duration::from_secs(60)).min_retries(5)),
        )
        .await
        .expect("subscribed");
    let budget = subscription.retry_budget.expect("a budget");
    assert_eq!(
        (budget.percent, budget.window(), budget.min_retries),
        (20, Duration::from_secs(60), 5)
    );
    client
        .put_schedule("s", &NewSchedule::new("@daily", "q", "t"))
        .await
        .expect("a schedule");

    let id = job.id;
    let sub = subscription.id;
    assert_eq!(
        typed(&client.get_job(id).await.expect("job")),
        raw(&format!("/api/jobs/{id}")).await
    );
    assert_eq!(
        typed(&client.list_jobs(&JobFilter::new()).await.expect("jobs")),
        raw("/api/jobs").await
    );
    assert_eq!(
        typed(&client.get_queue("q").await.expect("queue")),
        raw("/api/queues/q").await
    );
    assert_eq!(
        typed(&client.stats().await.expect("stats")),
        raw("/api/stats").await
    );
    assert_eq!(
        typed(&client.get_subscription(sub).await.expect("subscription")),
        raw(&format!("/api/subscriptions/{sub}")).await
    );
    assert_eq!(
        typed(&client.get_schedule("s").await.expect("schedule")),
        raw("/api/schedules/s").await
    );
    assert_eq!(
        typed(&client.schedule_ticks("s", Some(2)).await.expect("ticks")),
        raw("/api/schedules/s/ticks?count=2").await
    );
    // A delivery with its attempt, once the refused connection is logged.
    client
        .enqueue(&NewJob::new("orders", "o"))
        .await
        .expect("enqueued");
    let delivery = eventually("an attempt", || {
        let client = client.clone();
        async move {
            let page = client
                .list_deliveries(sub, &DeliveryFilter::new())
                .await
                .expect("deliveries");
            let first = page.deliveries.first()?.id;
            let delivery = client.get_delivery(first).await.expect("a delivery");
            // Scheduled for its far retry: the attempt's commit is done, nothing moves.
            let attempts = delivery.attempts.as_ref()?;
            (!attempts.is_empty() && delivery.status == JobStatus::Scheduled).then_some(delivery)
        }
    })
    .await;
    assert_eq!(
        typed(&delivery),
        raw(&format!("/api/deliveries/{}", delivery.id)).await
    );
    let subscription = client.get_subscription(sub).await.expect("subscription");
    assert_eq!(
        subscription.health.endpoint.origin,
        format!("http://{closed}")
    );
    assert_eq!(subscription.health.endpoint.breaker, BreakerState::Closed);
}

/// An answer as JSON, to compare with the server's.
fn typed<T: Serialize>(answer: &T) -> serde_json::Value {
    serde_json::to_value(answer).expect("serializable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_already_in_json_enqueue_as_one_batch() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let lines = [
        r#"{"queue": "bulk", "type": "t", "payload": {"n": 1}, "delay": "1h"}"#,
        r#"{"queue": "bulk", "type": "t", "run_at": 0}"#,
    ];
    let jobs: Vec<Box<serde_json::value::RawValue>> = lines
        .iter()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    let enqueued = client.enqueue_many_json(&jobs).await.expect("enqueued");
    assert_eq!(
        enqueued.iter().map(|e| e.status).collect::<Vec<_>>(),
        [JobStatus::Scheduled, JobStatus::Ready]
    );
    let bad: Box<serde_json::value::RawValue> =
        serde_json::from_str(r#"{"queue": "bulk", "priority": "high"}"#).expect("JSON");
    let error = client
        .enqueue_many_json(&[jobs[0].clone(), bad])
        .await
        .expect_err("refused");
    assert!(
        error.field().is_some_and(|f| f.starts_with("jobs[1]")),
        "{error}"
    );
    assert_eq!(
        client
            .stats()
            .await
            .expect("stats")
            .queue("bulk")
            .unfinished(),
        2
    );
}

/// The cluster (one server here) with its workers, named by a take's `worker`, by the client's
/// worker name, or by their address and User-Agent; and the activity per minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_lists_named_workers_and_counts_activity() {
    let server = Server::start(&[]).await;
    let client = server.client();
    for _ in 0..3 {
        client
            .enqueue(&NewJob::new("cl", "t"))
            .await
            .expect("enqueued");
    }
    let taken = client
        .take(&Take::queue("cl").worker("by-take"))
        .await
        .expect("taken");
    client.complete(&taken[0]).await.expect("completed");
    let named = client.with_worker("by-client").expect("a name");
    assert_eq!(named.worker(), Some("by-client"));
    named.take(&Take::queue("cl")).await.expect("taken");
    client.take(&Take::queue("cl")).await.expect("taken");

    let cluster = client.cluster().await.expect("the cluster");
    assert_eq!(cluster.servers.len(), 1);
    let this = cluster.this().expect("the server answering");
    assert_eq!(this.version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(
        this.address.as_deref(),
        Some(server.address.to_string().as_str())
    );
    let mut workers: Vec<(String, Vec<String>, u64)> = cluster
        .workers()
        .map(|w| (w.name.clone(), w.queues.clone(), w.in_flight))
        .collect();
    workers.sort();
    let agent = format!("127.0.0.1 tenax-client/{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        workers,
        [
            (agent, vec!["cl".to_owned()], 1),
            ("by-client".to_owned(), vec!["cl".to_owned()], 1),
            ("by-take".to_owned(), vec!["cl".to_owned()], 0),
        ]
    );

    let activity = client.activity(Some(5)).await.expect("the activity");
    assert_eq!(activity.minutes.len(), 5);
    assert_eq!((activity.total.enqueued, activity.total.completed), (3, 1));
    assert_eq!(
        client
            .activity(None)
            .await
            .expect("the activity")
            .minutes
            .len(),
        60
    );
    let error = client.activity(Some(0)).await.expect_err("refused");
    assert_eq!(error.field(), Some("minutes"), "{error}");
    assert!(client.with_worker("").is_err());
    assert!(client.with_worker("bad\nname").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_sent_kept_and_waited_for() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let enqueued = client
        .enqueue_many(
            &(0..3)
                .map(|i| NewJob::new("sums", "sum").payload(i))
                .collect::<Vec<_>>(),
        )
        .await
        .expect("a batch");
    let ids: Vec<u64> = enqueued.iter().map(|e| e.id).collect();
    let jobs = client
        .take(&Take::queue("sums").max(3))
        .await
        .expect("jobs");
    assert_eq!(jobs.len(), 3);
    let by_id = |id: u64| jobs.iter().find(|j| j.id == id).expect("taken");

    // A producer waits; the worker completes with a result; the wait answers with it.
    let waiter = {
        let client = client.clone();
        let id = ids[0];
        tokio::spawn(async move { client.wait_for_job(id, Duration::from_secs(30)).await })
    };
    client
        .complete_with_result(by_id(ids[0]), &json!({"sum": 42}))
        .await
        .expect("completed");
    let done = waiter.await.expect("the waiter").expect("the job");
    assert_eq!(done.status, JobStatus::Completed);
    assert_eq!(
        done.result::<serde_json::Value>()
            .expect("a result")
            .expect("JSON"),
        json!({"sum": 42})
    );

    // A batch, with a result and without.
    let raw = serde_json::value::RawValue::from_string("[1, 2]".into()).expect("JSON");
    let results = client
        .complete_many_with_results(&[
            (by_id(ids[1]).lease(), Some(&*raw)),
            (by_id(ids[2]).lease(), None),
        ])
        .await
        .expect("completed");
    assert!(results.iter().all(|r| r.completed), "{results:?}");
    let shown = client.get_job(ids[1]).await.expect("the job");
    assert_eq!(shown.result.as_deref().map(|r| r.get()), Some("[1, 2]"));
    assert!(
        client
            .get_job(ids[2])
            .await
            .expect("the job")
            .result
            .is_none()
    );

    // The old call still completes without one; a wait that runs out shows the job unfinished.
    let id = client
        .enqueue(&NewJob::new("sums", "sum"))
        .await
        .expect("enqueued")
        .id;
    let shown = client
        .wait_for_job(id, Duration::from_millis(200))
        .await
        .expect("the job");
    assert_eq!(shown.status, JobStatus::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dag_in_one_batch_hands_each_job_its_parents_results() {
    use tenax_client::{OnParentDead, Parent};
    let server = Server::start(&[]).await;
    let client = server.client();
    let jobs = [
        NewJob::new("dag", "sum")
            .payload(json!(null))
            .after(Parent::Step("one".into()))
            .after(Parent::Index(2)),
        NewJob::new("dag", "num").payload(json!(1)).step("one"),
        NewJob::new("dag", "num").payload(json!(2)),
        NewJob::new("dag", "tidy")
            .payload(json!(null))
            .after(Parent::Index(0))
            .on_parent_dead(OnParentDead::Run),
    ];
    let enqueued = client.enqueue_many(&jobs).await.expect("enqueued");
    let ids: Vec<u64> = enqueued.iter().map(|e| e.id).collect();
    assert_eq!(enqueued[0].status, JobStatus::Waiting);
    let info = client.get_job(ids[0]).await.expect("read");
    assert_eq!(info.after, [ids[1], ids[2]]);
    assert_eq!(
        client.get_job(ids[3]).await.expect("read").on_parent_dead,
        Some(OnParentDead::Run)
    );
    let numbers = client
        .take(&Take::queue("dag").max(10))
        .await
        .expect("taken");
    assert_eq!(
        numbers.iter().map(|t| t.id).collect::<Vec<_>>(),
        [ids[1], ids[2]]
    );
    for taken in &numbers {
        let n: i64 = taken.payload().expect("a number");
        client
            .complete_with_result(taken.lease(), &json!({"n": n}))
            .await
            .expect("completed");
    }
    let sum = client.take(&Take::queue("dag")).await.expect("taken");
    assert_eq!(sum[0].id, ids[0]);
    let total: i64 = [ids[1], ids[2]]
        .iter()
        .map(|p| {
            let result: serde_json::Value = sum[0]
                .parent_result(*p)
                .expect("a parent with a result")
                .expect("JSON");
            result["n"].as_i64().expect("a number")
        })
        .sum();
    assert_eq!(total, 3);
    client.complete(sum[0].lease()).await.expect("completed");
    let workflow = client.workflow(ids[3]).await.expect("the workflow");
    assert_eq!(workflow.jobs.len(), 4);
    assert_eq!(workflow.edges.len(), 3);
    assert_eq!(workflow.status, "running");
}
