//! Workflows: the jobs joined by `after` (`crate::model::dependency`), found from any one of
//! them by walking the edges both ways.

use std::collections::{BTreeMap, BTreeSet};

use super::Engine;
use crate::engine::EngineError;
use crate::model::{Job, JobId};

/// The most jobs one look at a workflow reads.
pub const MAX_WORKFLOW_JOBS: usize = 1_000;

/// The jobs joined to one by their dependencies, and the edges between them.
#[derive(Debug, Clone)]
pub struct Workflow {
    /// In id order.
    pub jobs: Vec<Job>,
    /// `(parent, child)` pairs, in order; both ends are in `jobs`.
    pub edges: Vec<(JobId, JobId)>,
    /// The walk stopped at `max` jobs: there are more.
    pub truncated: bool,
}

impl Engine {
    /// Whether any job waits (or waited) for job `id`.
    pub async fn has_dependents(&self, id: JobId) -> Result<bool, EngineError> {
        Ok(!self.store.children(&[id]).await?.is_empty())
    }

    /// The workflow job `id` belongs to: every job reached from it through parents (a job's
    /// `after`) and children (the store's edges), up to `max` jobs; `None` if there is no such
    /// job. A job alone is a workflow of one. Jobs deleted since are left out, as are the edges
    /// to them.
    pub async fn workflow(&self, id: JobId, max: usize) -> Result<Option<Workflow>, EngineError> {
        let Some(first) = self.job(id).await? else {
            return Ok(None);
        };
        let mut found: BTreeMap<JobId, Job> = BTreeMap::new();
        let mut edges: BTreeSet<(JobId, JobId)> = BTreeSet::new();
        let mut frontier = vec![first];
        let mut truncated = false;
        // Breadth first: each round reads the children of every job found in the last.
        while !frontier.is_empty() {
            let ids: Vec<JobId> = frontier.iter().map(|j| j.id).collect();
            let mut next: BTreeSet<JobId> = BTreeSet::new();
            for job in &frontier {
                for parent in &job.spec.after {
                    edges.insert((*parent, job.id));
                    next.insert(*parent);
                }
            }
            for (parent, child) in self.store.children(&ids).await? {
                edges.insert((parent, child));
                next.insert(child);
            }
            for job in frontier.drain(..) {
                found.insert(job.id, job);
            }
            for id in next {
                if found.contains_key(&id) {
                    continue;
                }
                if found.len() + frontier.len() >= max {
                    truncated = true;
                    break;
                }
                if let Some(job) = self.job(id).await? {
                    frontier.push(job);
                }
            }
            if truncated {
                for job in frontier.drain(..) {
                    found.insert(job.id, job);
                }
            }
        }
        let edges = edges
            .into_iter()
            .filter(|(p, c)| found.contains_key(p) && found.contains_key(c))
            .collect();
        Ok(Some(Workflow {
            jobs: found.into_values().collect(),
            edges,
            truncated,
        }))
    }
}
