//! SQL for the seam's filters and selections, with their parameters.

use tokio_postgres::types::ToSql;

use super::rows::{id, status_code, time};
use crate::model::{JobFilter, JobId, Selection, Status};

/// A statement being built, and its parameters in order.
#[derive(Debug, Default)]
pub struct Query {
    pub sql: String,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Query {
    pub fn new(sql: impl Into<String>) -> Self {
        Self {
            sql: sql.into(),
            params: Vec::new(),
        }
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
