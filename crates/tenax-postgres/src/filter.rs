//! SQL for the seam's filters and selections, with their parameters.

use tenax_core::model::{JobFilter, JobId, Selection, Status};
use tokio_postgres::types::ToSql;

use super::rows::{id, status_code, time};
use super::statements::{Prefix, Text};

/// A statement being built from a declared [`Prefix`], and its parameters in order. The
/// functions that build one are listed with their shapes ([`super::statements`]).
#[derive(Debug)]
pub struct Query {
    prefix: Prefix,
    sql: String,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Text for Query {
    fn text(&self) -> &str {
        &self.sql
    }
}

impl Query {
    pub fn new(prefix: Prefix) -> Self {
        Self {
            prefix,
            sql: prefix.text().to_owned(),
            params: Vec::new(),
        }
    }

    /// The prefix this statement was built from.
    pub fn prefix(&self) -> Prefix {
        self.prefix
    }

    /// Adds a parameter; returns its placeholder (`$n`).
    pub fn param(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(value));
        format!("${}", self.params.len())
    }

    pub fn push(&mut self, sql: &str) {
        self.sql.push_str(sql);
    }

    pub fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }

    /// Appends `AND …` for every condition of `filter`, on a job table's columns.
    pub fn filter(&mut self, filter: &JobFilter) {
        let (in_flight, scheduled) = (
            status_code(Status::InFlight),
            status_code(Status::Scheduled),
        );
        if let Some(queue) = &filter.queue {
            let p = self.param(queue.clone());
            self.push(&format!(" AND queue = {p}"));
        }
        if let Some(status) = filter.status {
            let p = self.param(status_code(status));
            self.push(&format!(" AND status = {p}"));
        }
        if let Some(kind) = &filter.kind {
            let p = self.param(kind.clone());
            self.push(&format!(" AND kind = {p}"));
        }
        if let Some(since) = filter.finished_since_ms {
            let p = self.param(time(since));
            self.push(&format!(" AND finished_at >= {p}"));
        }
        if let Some(now) = filter.live_at_ms {
            let p = self.param(time(now));
            self.push(&format!(
                " AND status <= {in_flight} AND (expires_at IS NULL OR expires_at > {p})"
            ));
        }
        if filter.not_scheduled {
            self.push(&format!(" AND status <> {scheduled}"));
        }
        if let Some((claimed, now)) = filter.claimed_at {
            let p = self.param(time(now));
            let held = format!(
                "(status = {in_flight} AND claim_id IS NOT NULL AND lease_expires_at > {p})"
            );
            if claimed {
                self.push(&format!(" AND {held}"));
            } else {
                self.push(&format!(" AND NOT {held}"));
            }
        }
        if let Some(origin) = &filter.not_origin {
            let p = self.param(origin.clone());
            self.push(&format!(" AND origin IS DISTINCT FROM {p}"));
        }
    }

    /// Appends `AND …` for a selection: its ids, if it names them, and its filter.
    pub fn selection(&mut self, selection: &Selection) {
        if let Some(ids) = &selection.ids {
            let p = self.param(ids_param(ids));
            self.push(&format!(" AND id = ANY({p})"));
        }
        self.filter(&selection.filter);
    }
}

/// Job ids as a `bigint[]` parameter.
pub fn ids_param(ids: &[JobId]) -> Vec<i64> {
    ids.iter().map(|i| id(i.0)).collect()
}

/// Every shape of filter [`Query::filter`] writes, with a label naming its conditions: each
/// condition present or not, and a claim condition either way (2^7 × 3 = 384). The values do
/// not change the text. Every field is named, so a new condition does not compile until it is
/// enumerated here.
pub fn filter_shapes() -> Vec<(String, JobFilter)> {
    const CONDITIONS: [&str; 7] = [
        "queue",
        "status",
        "kind",
        "finished_since",
        "live_at",
        "not_scheduled",
        "not_origin",
    ];
    let mut shapes = Vec::new();
    for present in 0..1_u32 << CONDITIONS.len() {
        let has = |bit: usize| present & (1 << bit) != 0;
        for claimed in [None, Some(true), Some(false)] {
            let filter = JobFilter {
                queue: has(0).then(|| "q".to_owned()),
                status: has(1).then_some(Status::Ready),
                kind: has(2).then(|| "k".to_owned()),
                finished_since_ms: has(3).then_some(1),
                live_at_ms: has(4).then_some(1),
                not_scheduled: has(5),
                not_origin: has(6).then(|| "o".to_owned()),
                claimed_at: claimed.map(|claimed| (claimed, 1)),
            };
            let mut label: Vec<&str> = CONDITIONS
                .iter()
                .enumerate()
                .filter(|(bit, _)| has(*bit))
                .map(|(_, name)| *name)
                .collect();
            match claimed {
                Some(true) => label.push("claimed"),
                Some(false) => label.push("not_claimed"),
                None => {}
            }
            shapes.push((label.join("+"), filter));
        }
    }
    shapes
}

/// Every shape of selection [`Query::selection`] writes: with ids or without, each with every
/// filter shape ([`filter_shapes`]).
pub fn selection_shapes() -> Vec<(String, Selection)> {
    filter_shapes()
        .into_iter()
        .flat_map(|(label, filter)| {
            [
                (format!("ids+{label}"), Some(vec![JobId(1)])),
                (label, None),
            ]
            .map(|(label, ids)| {
                (
                    label,
                    Selection {
                        ids,
                        filter: filter.clone(),
                    },
                )
            })
        })
        .collect()
}
