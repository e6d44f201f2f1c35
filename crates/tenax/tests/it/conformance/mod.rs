//! The conformance suite of the storage seam ([`tenax_core::store::Store`]): what every backend must
//! do, written once against the seam and run against each backend.
//!
//! Each case is an `async fn` taking a [`Backend`]: a place where a store can be opened, closed
//! and opened again on the same data (for the embedded store, a directory). Each case checks
//! its transitions, then closes the store, reopens it and checks that the state survived. What
//! a restart does to leases is the backend's declared property
//! ([`tenax_core::store::StoreProperties::durable_leases`]): without it, jobs in flight come back
//! ready; with it, they are still leased to the same holders.
//!
//! One module of the integration tests (`cargo test -p tenax --test it -- conformance::`), one
//! file per family of the seam (`src/store/seam.rs`), each holding its cases and, in its module
//! doc, which of its operations which cases check (a case checks what its family is about, and
//! often operations of other families on the way: the tables name those too, with the file they
//! are in):
//!
//! | file               | family                                  |
//! |--------------------|-----------------------------------------|
//! | `job_inserts.rs`   | `JobInserts`                            |
//! | `job_leases.rs`    | `JobLeases`, with the per-queue limits  |
//! | `claims.rs`        | `ClaimStore`                            |
//! | `job_upkeep.rs`    | `JobUpkeep`                             |
//! | `dependencies.rs`  | waiting jobs, across the job families   |
//! | `job_curation.rs`  | `JobCuration`                           |
//! | `cancel.rs`        | `JobCuration::cancel_jobs`, and the mark on a lease |
//! | `job_reads.rs`     | `JobReads`                              |
//! | `batches.rs`       | `BatchStore`                            |
//! | `queues.rs`        | `QueueStore`                            |
//! | `schedules.rs`     | `ScheduleStore`                         |
//! | `subscriptions.rs` | `SubscriptionStore`                     |
//! | `endpoints.rs`     | `EndpointStore`                         |
//! | `tokens.rs`        | `TokenStore`                            |
//! | `activity.rs`      | `ActivityStore`                         |
//! | `servers.rs`       | `ServerStore`                           |
//! | `import.rs`        | `StoreImport`                           |
//! | `lifecycle.rs`     | `StoreLifecycle`, and opening a store   |
//! | `secrets.rs`       | secrets at rest, across every family    |
//!
//! `support.rs` holds the [`Backend`] trait and the backends (the embedded store in a
//! temporary directory; PostgreSQL on a fresh database per test on the test server,
//! `tests/it/common/postgres.rs`), the helpers the cases share, and the
//! [`conformance_suite!`] macro. The list at the bottom of this file runs every case on every
//! backend: a test is `<backend>::<case>` (`postgres::due_jobs_are_promoted`), whichever file
//! the case is in. A new case is an `async fn` in its family's file and a line in that list; a
//! new backend is a [`Backend`] and a line in `backends`. What only one backend promises is a
//! plain test in its family's file (`lifecycle::embedded_properties`).

mod support;

mod activity;
mod batches;
mod cancel;
mod claims;
mod dependencies;
mod endpoints;
mod import;
mod job_curation;
mod job_inserts;
mod job_leases;
mod job_reads;
mod job_upkeep;
mod lifecycle;
mod pools;
mod queues;
mod schedules;
mod secrets;
mod servers;
mod subscriptions;
mod tokens;

use support::{Backend, Embedded, Pooled, Postgres, conformance_suite};

conformance_suite! {
    backends: {
        embedded: Embedded::new(),
        postgres: Postgres::new().await,
        pooled: Pooled::new().await,
    },
    cases: {
        job_inserts: [
            enqueue_is_atomic_and_ids_increase,
            unique_keys_refuse_or_return_the_holder,
            deliveries_are_stored_with_their_message_and_subscription,
            concurrent_small_enqueues_keep_their_own_jobs,
            inserts_are_never_made_on_facts_older_than_a_change,
        ],
        job_leases: [
            take_is_by_priority_then_age_and_leases,
            complete_needs_the_current_lease,
            completed_jobs_keep_their_results,
            fail_asks_the_decision_and_records_it,
            lease_tokens_are_unpredictable_and_exact,
            acknowledgements_after_a_leases_end_are_refused,
            takes_and_pops_skip_jobs_past_their_expiry,
            pop_takes_and_deletes_ready_jobs,
            deliveries_are_taken_finished_and_logged,
            racing_operations_on_a_job_are_serialised,
            concurrency_limits_hold_takes_back,
            a_take_with_an_older_clock_counts_the_starts_of_its_period,
            rate_limits_hold_takes_back_across_restarts,
        ],
        claims: [
            a_closed_stream_releases_its_jobs,
            claims_are_renewed_ended_and_forgotten,
        ],
        dependencies: [
            a_job_waits_for_every_parent,
            a_batch_is_a_dag_of_earlier_jobs,
            a_lost_parent_cancels_or_releases_its_children,
            concurrent_completions_release_a_child_once,
            a_child_enqueued_while_its_parent_ends_is_never_left_waiting,
            imported_waiting_jobs_wait_as_they_did,
            every_end_of_a_parent_settles_its_children,
            a_replayed_parent_resumes_its_workflow,
            a_parent_ending_while_a_replay_resumes_its_child_is_counted_once,
        ],
        job_upkeep: [
            expired_leases_go_to_the_decision,
            a_queues_expiry_waits_for_a_lease_being_ended,
            due_jobs_are_promoted,
            finished_jobs_are_purged_after_retention,
            expired_jobs_are_deleted_whatever_their_status,
        ],
        job_curation: [
            dead_jobs_are_replayed,
            replay_respects_unique_keys,
            jobs_are_deleted_by_selection,
            runs_now_and_replays_mark_the_next_run,
            peeks_and_checked_deletes_see_the_current_state,
        ],
        cancel: [
            unfinished_jobs_are_cancelled_or_marked,
            a_marked_lease_is_seen_by_the_decision_that_ends_it,
            a_selection_cancels_what_it_names,
            cancelled_jobs_are_counted_replayed_and_purged_as_dead_ones,
        ],
        job_reads: [
            list_filters_and_pages,
            backlog_and_lease_facts_are_reported,
            listings_page_both_ways_by_queue_type_and_status,
            searches_are_bounded_and_go_on,
            heads_of_queues_tell_how_long_they_waited,
            counts_per_queue_and_status,
            list_filters_for_messages_and_counts_agree,
        ],
        batches: [
            concurrent_finishes_enqueue_each_callback_once,
            a_dead_member_fires_on_complete_and_not_on_success,
            jobs_are_added_to_an_open_batch_until_it_closes,
            a_batch_closed_after_its_members_finished_fires_at_once,
            batches_are_listed_and_deleted,
            lease_expiry_and_pops_count_their_members,
        ],
        queues: [
            queue_configs_are_kept,
            queues_are_deleted_with_their_jobs,
            queues_are_listed_once_from_every_job,
        ],
        schedules: [
            schedules_are_stored_changed_and_deleted,
            a_tick_is_recorded_once_with_its_job,
            a_change_never_overwrites_a_tick_recorded_meanwhile,
        ],
        subscriptions: [
            subscriptions_are_stored_changed_and_deleted,
            unique_endpoints_are_held_per_queue,
        ],
        endpoints: [
            endpoint_states_change_atomically_and_are_kept,
        ],
        tokens: [
            tokens_are_stored_by_id,
        ],
        activity: [
            a_minutes_counts_add_up_across_writers,
            activity_is_read_by_window,
            old_minutes_are_purged,
        ],
        servers: [
            servers_are_listed_with_what_they_say,
        ],
        import: [
            imported_records_keep_their_ids_and_state,
        ],
        lifecycle: [
            leases_across_a_restart_follow_the_declared_property,
            signals_announce_what_may_have_changed,
            a_lone_server_leads,
            servers_count_those_sharing_the_store,
            close_keeps_everything_acknowledged,
            newer_formats_are_refused,
        ],
        secrets: [
            secrets_are_sealed_at_rest,
            a_wrong_secrets_key_is_refused_and_changes_nothing,
            a_key_rotation_loses_nothing_wherever_it_stops,
            secrets_kept_in_clear_before_are_sealed_at_open,
            sealed_payloads_keep_their_mark_and_one_data_key_opens_them,
        ],
    },
}
