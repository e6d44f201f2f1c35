//! Reads: one job, a filtered page, counts, peeks, a delivery's attempts. Reads see both job
//! tables through the `tenax_all_jobs` view.

use std::collections::HashMap;

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::StatusSlots;
use tenax_core::model::{
    Attempt, Backlog, Job, JobFilter, JobId, JobPeek, Order, Page, QueueCounts, Searched, Status,
    TextQuery,
};
use tenax_core::store::{JobReads, StoreError, from_json_bytes};

use super::filter::{Query, filter_shapes, ids_param};
use super::rows::{id, job_columns, job_of, limit, peek_columns, peek_of, status_of, unid, untime};
use super::statements::{prefixes, statements};
use super::transitions::query;
use super::{PostgresStore, fault};

#[async_trait]
impl JobReads for PostgresStore {
    async fn get_job(&self, job: JobId) -> Result<Option<Job>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &JOB, &[&id(job.0)])
            .await
            .map_err(fault("reading a job"))?;
        rows.first().map(job_of).transpose()
    }

    async fn list_jobs(&self, filter: &JobFilter, page: Page) -> Result<Vec<Job>, StoreError> {
        let client = self.client().await?;
        let statement = listing(filter, page);
        let rows = query(&client, &statement, &statement.params())
            .await
            .map_err(fault("listing jobs"))?;
        rows.iter().map(job_of).collect()
    }

    async fn count_jobs(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let statement = counting(filter);
        let rows = query(&client, &statement, &statement.params())
            .await
            .map_err(fault("counting jobs"))?;
        Ok(rows
            .first()
            .map_or(0, |r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)))
    }

    async fn count_jobs_upto(
        &self,
        filter: &JobFilter,
        max: u64,
    ) -> Result<(u64, bool), StoreError> {
        let client = self.client().await?;
        let statement = counting_upto(filter, max);
        let rows = query(&client, &statement, &statement.params())
            .await
            .map_err(fault("counting jobs"))?;
        let count = rows
            .first()
            .map_or(0, |r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0));
        Ok((count.min(max), count > max))
    }

    async fn peek_jobs(&self, ids: &[JobId]) -> Result<Vec<Option<JobPeek>>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &PEEK, &[&ids_param(ids)])
            .await
            .map_err(fault("looking at jobs"))?;
        let found: HashMap<JobId, JobPeek> = rows.iter().map(peek_of).collect::<Result<_, _>>()?;
        Ok(ids.iter().map(|job| found.get(job).cloned()).collect())
    }

    async fn counts(&self) -> Result<Vec<QueueCounts>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &COUNTS, &[])
            .await
            .map_err(fault("counting jobs"))?;
        let mut by_queue: HashMap<String, StatusSlots> = HashMap::new();
        for row in &rows {
            let slots = by_queue.entry(row.get(0)).or_default();
            add(slots, status_of(row.get(1))?, row.get(2));
        }
        let mut counts: Vec<QueueCounts> = by_queue
            .into_iter()
            .map(|(queue, slots)| QueueCounts::from_slots(queue, slots))
            .collect();
        counts.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok(counts)
    }

    async fn queue_counts(&self, queue: &str) -> Result<QueueCounts, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &QUEUE_COUNTS, &[&queue])
            .await
            .map_err(fault("counting a queue's jobs"))?;
        let mut slots = StatusSlots::default();
        for row in &rows {
            add(&mut slots, status_of(row.get(0))?, row.get(1));
        }
        Ok(QueueCounts::from_slots(queue, slots))
    }

    /// Two statements: unfinished jobs by queue and status (a scan of `tenax_jobs`, which
    /// holds only the unfinished ones), and dead and cancelled jobs by queue
    /// (`tenax_finished_dead` and `tenax_finished_cancelled`, indexes of those only). The first grows with the backlog; the metrics count again only
    /// once the last count is 20 times as old as it took.
    async fn backlog(&self) -> Result<Vec<Backlog>, StoreError> {
        let what = "counting jobs by queue";
        let client = self.client().await?;
        let mut by_queue: HashMap<String, Backlog> = HashMap::new();
        let unfinished = query(&client, &UNFINISHED_COUNTS, &[])
            .await
            .map_err(fault(what))?;
        for row in &unfinished {
            let queue: String = row.get(0);
            let n = u64::try_from(row.get::<_, i64>(2)).unwrap_or(0);
            let backlog = by_queue.entry(queue.clone()).or_insert_with(|| Backlog {
                queue,
                ..Backlog::default()
            });
            match status_of(row.get(1))? {
                Status::Scheduled => backlog.scheduled += n,
                Status::Ready => backlog.ready += n,
                Status::InFlight => backlog.in_flight += n,
                Status::Waiting => backlog.waiting += n,
                Status::Completed | Status::Dead | Status::Cancelled => {}
            }
        }
        let given_up = query(&client, &GIVEN_UP_COUNTS, &[])
            .await
            .map_err(fault(what))?;
        for row in &given_up {
            let queue: String = row.get(0);
            let n = u64::try_from(row.get::<_, i64>(2)).unwrap_or(0);
            let backlog = by_queue.entry(queue.clone()).or_insert_with(|| Backlog {
                queue,
                ..Backlog::default()
            });
            if status_of(row.get(1))? == Status::Cancelled {
                backlog.cancelled += n;
            } else {
                backlog.dead += n;
            }
        }
        Ok(by_queue.into_values().collect())
    }

    /// PostgreSQL looks at the candidates and tells which may hold the text (a test on the
    /// stored JSON text, so an error's field names may match too); the jobs it names are read
    /// and judged exactly here.
    async fn search_jobs(
        &self,
        filter: &JobFilter,
        text: &TextQuery,
        page: Page,
        budget: usize,
    ) -> Result<Searched, StoreError> {
        let client = self.client().await?;
        let statement = searching(filter, text, page, budget);
        let rows = query(&client, &statement, &statement.params())
            .await
            .map_err(fault("searching jobs"))?;
        let mut searched = Searched {
            exhausted: rows.len() <= budget,
            ..Searched::default()
        };
        let mut hits = Vec::new();
        for row in rows.iter().take(budget) {
            let job = JobId(unid(row.get(0)));
            searched.looked_at += 1;
            searched.looked_to = Some(job);
            if row.get::<_, bool>(1) {
                hits.push(job);
                if hits.len() >= page.limit {
                    searched.exhausted &= searched.looked_at == rows.len();
                    break;
                }
            }
        }
        if hits.is_empty() {
            return Ok(searched);
        }
        let rows = query(&client, &JOBS, &[&ids_param(&hits)])
            .await
            .map_err(fault("reading jobs found"))?;
        let mut found: HashMap<JobId, Job> = HashMap::new();
        for row in &rows {
            let job = job_of(row)?;
            found.insert(job.id, job);
        }
        searched.jobs = hits
            .iter()
            .filter_map(|job| found.remove(job))
            .filter(|job| text.matches(job.spec.payload.get(), &job.errors))
            .collect();
        Ok(searched)
    }

    async fn children(&self, parents: &[JobId]) -> Result<Vec<(JobId, JobId)>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &CHILDREN, &[&ids_param(parents)])
            .await
            .map_err(fault("reading the jobs waiting for others"))?;
        Ok(rows
            .iter()
            .map(|r| (JobId(unid(r.get(0))), JobId(unid(r.get(1)))))
            .collect())
    }

    async fn ready_since(&self, queues: &[String]) -> Result<Vec<Option<UnixMs>>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &READY_SINCE, &[&queues])
            .await
            .map_err(fault("reading the heads of queues"))?;
        let mut heads = vec![None; queues.len()];
        for row in &rows {
            let at = usize::try_from(row.get::<_, i64>(0)).unwrap_or(0);
            if let Some(slot) = at.checked_sub(1).and_then(|i| heads.get_mut(i)) {
                *slot = Some(untime(row.get(1)));
            }
        }
        Ok(heads)
    }

    async fn attempts(&self, job: JobId) -> Result<Vec<Attempt>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &ATTEMPTS, &[&id(job.0)])
            .await
            .map_err(fault("reading a delivery's attempts"))?;
        match rows.first() {
            Some(row) => row
                .get::<_, Vec<&str>>(0)
                .into_iter()
                .map(|text| from_json_bytes("delivery attempt", text.as_bytes()))
                .collect(),
            None => Ok(Vec::new()),
        }
    }
}

/// Adds a count to its status's slot, in the order of [`Status::ALL`].
fn add(slots: &mut StatusSlots, status: Status, count: i64) {
    if let Some(at) = Status::ALL.iter().position(|s| *s == status) {
        slots[at] += u64::try_from(count).unwrap_or(0);
    }
}

/// A page of the jobs `filter` keeps.
fn listing(filter: &JobFilter, page: Page) -> Query {
    let mut statement = Query::new(LIST_JOBS);
    statement.filter(filter);
    page_of(&mut statement, page, page.limit);
    statement
}

/// Appends `page`'s start and order, and a limit of `limit` rows.
fn page_of(statement: &mut Query, page: Page, limit_to: usize) {
    let (after, order) = match page.order {
        Order::Ascending => (">", "ASC"),
        Order::Descending => ("<", "DESC"),
    };
    if let Some(from) = page.after {
        let p = statement.param(id(from.0));
        statement.push(&format!(" AND id {after} {p}"));
    }
    let p = statement.param(limit(limit_to));
    statement.push(&format!(" ORDER BY id {order} LIMIT {p}"));
}

/// How many jobs `filter` keeps.
fn counting(filter: &JobFilter) -> Query {
    let mut statement = Query::new(COUNT_JOBS);
    statement.filter(filter);
    statement
}

/// How many jobs `filter` keeps, counting no further than one past `max`.
fn counting_upto(filter: &JobFilter, max: u64) -> Query {
    let mut statement = Query::new(COUNT_JOBS_UPTO);
    statement.filter(filter);
    let p = statement.param(i64::try_from(max.saturating_add(1)).unwrap_or(i64::MAX));
    statement.push(&format!(" LIMIT {p}) AS matching"));
    statement
}

/// The ids of the next `budget` jobs (and one more) of a page that `filter` keeps, and
/// whether each may hold `text`.
fn searching(filter: &JobFilter, text: &TextQuery, page: Page, budget: usize) -> Query {
    let mut statement = Query::new(SEARCH_JOBS);
    let lower = statement.param(text.lower.clone());
    let escaped = statement.param(text.escaped.clone());
    statement.push(&format!(
        "(strpos(lower(payload), {lower}) > 0
              OR strpos(lower(array_to_string(errors, ' ')), {escaped}) > 0)
             FROM tenax_all_jobs WHERE true"
    ));
    statement.filter(filter);
    // One more than the budget: whether anything lies past it.
    page_of(&mut statement, page, budget.saturating_add(1));
    statement
}

/// Every statement this module builds: each with every filter shape
/// ([`filter_shapes`]) and, for pages, both orders, from the start or after a job.
pub(super) fn shapes() -> Vec<(String, Query)> {
    let text = TextQuery {
        lower: "t".to_owned(),
        escaped: "t".to_owned(),
    };
    let mut shapes = Vec::new();
    for (label, filter) in filter_shapes() {
        shapes.push((label.clone(), counting(&filter)));
        shapes.push((label.clone(), counting_upto(&filter, 10)));
        for order in [Order::Ascending, Order::Descending] {
            for after in [None, Some(JobId(1))] {
                let page = Page {
                    after,
                    limit: 10,
                    order,
                };
                let page_label = format!(
                    "{label};{order:?}{}",
                    if after.is_some() { ";after" } else { "" }
                );
                shapes.push((page_label.clone(), listing(&filter, page)));
                shapes.push((page_label, searching(&filter, &text, page, 10)));
            }
        }
    }
    shapes
}

prefixes! {
    LIST_JOBS = concat!("SELECT ", job_columns!(), " FROM tenax_all_jobs WHERE true");
    COUNT_JOBS = "SELECT count(*) FROM tenax_all_jobs WHERE true";
    COUNT_JOBS_UPTO = "SELECT count(*) FROM (SELECT 1 FROM tenax_all_jobs WHERE true";
    SEARCH_JOBS = "SELECT id, ";
}

statements! {
    /// A job wherever it is: each table by its primary key (the view would not be).
    JOB = concat!(
        "SELECT ",
        job_columns!(),
        " FROM tenax_jobs WHERE id = $1
                 UNION ALL SELECT ",
        job_columns!(),
        " FROM tenax_finished WHERE id = $1"
    );
    PEEK = concat!(
        "SELECT ",
        peek_columns!(),
        " FROM tenax_all_jobs WHERE id = ANY($1)"
    );
    JOBS = concat!(
        "SELECT ",
        job_columns!(),
        " FROM tenax_all_jobs WHERE id = ANY($1)"
    );
    COUNTS = "SELECT queue, status, count(*) FROM tenax_all_jobs GROUP BY queue, status";
    QUEUE_COUNTS = "SELECT status, count(*) FROM tenax_all_jobs WHERE queue = $1 GROUP BY status";
    UNFINISHED_COUNTS = "SELECT queue, status, count(*) FROM tenax_jobs GROUP BY queue, status";
    /// Two index scans: `tenax_finished_dead` and `tenax_finished_cancelled`.
    GIVEN_UP_COUNTS = "SELECT queue, 4::smallint, count(*) FROM tenax_finished WHERE status = 4
             GROUP BY queue
         UNION ALL
         SELECT queue, 5::smallint, count(*) FROM tenax_finished WHERE status = 5
             GROUP BY queue";
    READY_SINCE = "SELECT q.at, h.run_at FROM unnest($1::text[]) WITH ORDINALITY AS q(name, at)
             CROSS JOIN LATERAL (
                 SELECT run_at FROM tenax_jobs WHERE status = 1 AND queue = q.name
                 ORDER BY priority DESC, id LIMIT 1
             ) AS h";
    ATTEMPTS = "SELECT attempts FROM tenax_all_jobs WHERE id = $1";
    /// The edges of parents `$1` whose child is stored, by (parent, child).
    CHILDREN = "SELECT e.parent, e.child FROM tenax_edges e
             WHERE e.parent = ANY($1::bigint[])
               AND (EXISTS (SELECT 1 FROM tenax_jobs j WHERE j.id = e.child)
                 OR EXISTS (SELECT 1 FROM tenax_finished f WHERE f.id = e.child))
             ORDER BY e.parent, e.child";
}
