//! Batches through the client against the real server: made with callbacks, added to, closed,
//! read; the callbacks' jobs carry the counts.

use common::Server;
use tenax_client::{BatchState, Callback, NewBatch, NewJob, Take};

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_made_added_to_closed_and_fires_its_callbacks() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let made = client
        .create_batch(
            &NewBatch::new()
                .description("import")
                .on_complete(
                    Callback::new("reports", "import.report")
                        .payload(&serde_json::json!({"to": "ops"}))
                        .priority(5),
                )
                .on_success(Callback::new("reports", "import.publish").retry_limit(2))
                .job(NewJob::new("import", "row").payload(1))
                .open(),
        )
        .await
        .expect("made");
    assert_eq!(made.batch.state, BatchState::Open);
    assert_eq!(made.batch.counts.total, 1);
    assert_eq!(made.jobs.len(), 1);
    let id = made.batch.id;
    assert_eq!(
        client.get_job(made.jobs[0].id).await.expect("job").batch,
        Some(id)
    );

    let added = client
        .add_to_batch(id, &[NewJob::new("import", "row").payload(2)], false)
        .await
        .expect("added");
    assert_eq!(added.batch.counts.total, 2);
    let closed = client.close_batch(id).await.expect("closed");
    assert_eq!(closed.state, BatchState::Closed);
    let refused = client
        .add_to_batch(id, &[NewJob::new("import", "row")], false)
        .await
        .expect_err("closed");
    assert_eq!(refused.code(), Some("batch_closed"));

    let taken = client
        .take(&Take::queue("import").max(2))
        .await
        .expect("taken");
    assert_eq!(taken.len(), 2);
    for job in &taken {
        client.complete(job).await.expect("completed");
    }
    let finished = client.get_batch(id).await.expect("read");
    assert_eq!(finished.state, BatchState::Finished);
    assert_eq!((finished.counts.completed, finished.counts.pending), (2, 0));
    let report = client
        .get_job(finished.on_complete_job.expect("a callback"))
        .await
        .expect("the callback");
    assert_eq!(report.priority, 5);
    let payload: serde_json::Value = report.payload().expect("JSON");
    assert_eq!(payload["batch"]["completed"], 2);
    assert_eq!(payload["batch"]["succeeded"], true);
    assert_eq!(payload["payload"]["to"], "ops");
    assert!(finished.on_success_job.is_some());
    assert_eq!(
        finished.on_complete.as_ref().map(|c| c.kind.as_str()),
        Some("import.report")
    );
    let listed = client.list_batches(None, Some(10)).await.expect("listed");
    assert_eq!(listed.iter().map(|b| b.id).collect::<Vec<_>>(), [id]);
    client.delete_batch(id).await.expect("deleted");
    assert_eq!(
        client.get_batch(id).await.expect_err("gone").code(),
        Some("not_found")
    );
}
