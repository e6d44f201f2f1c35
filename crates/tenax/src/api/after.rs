//! A job's `after`: the jobs it waits for, as a request names them (a stored job's id, or
//! another job of the same batch by its `index` or its `step`), and the order a batch's jobs are
//! stored in so that each one's parents come before it (`tenax_core::model::dependency`).
//!
//! Invariant: what [`plan`] hands the engine names only earlier jobs of the batch, so the edges
//! can never form a cycle; a cycle in the request is refused, naming the jobs that form it.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use tenax_core::model::{After, JobId};

use super::error::ApiError;

/// The most jobs one job may wait for.
pub const MAX_PARENTS: usize = 1_000;

/// One item of a request's `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParentRef {
    /// A stored job.
    Job(JobId),
    /// The job at this index of the same batch.
    Index(usize),
    /// The job of the same batch with this `step`.
    Step(String),
}

/// Reads an `after` list (`field` names it in errors). A stored job is its id (a number, or a
/// string of digits for one past what JSON numbers hold exactly); another job of the batch is
/// `{"index": n}` or `{"step": "name"}`.
pub fn parse(values: &[Value], field: &str) -> Result<Vec<ParentRef>, ApiError> {
    if values.len() > MAX_PARENTS {
        return Err(ApiError::invalid(
            field,
            format!("may name at most {MAX_PARENTS} jobs, got {}", values.len()),
        ));
    }
    let mut parents = Vec::with_capacity(values.len());
    for (position, value) in values.iter().enumerate() {
        let item = format!("{field}[{position}]");
        let parent = parse_one(value).ok_or_else(|| {
            ApiError::invalid(
                &item,
                format!(
                    "must be a job id, {{\"index\": n}} or {{\"step\": \"name\"}}, got {value}"
                ),
            )
        })?;
        if let Some(first) = parents.iter().position(|p| *p == parent) {
            return Err(ApiError::invalid(
                &item,
                format!("repeats {field}[{first}]: name each job once"),
            ));
        }
        parents.push(parent);
    }
    Ok(parents)
}

fn parse_one(value: &Value) -> Option<ParentRef> {
    match value {
        Value::Number(number) => number.as_u64().map(|id| ParentRef::Job(JobId(id))),
        // Digits, for an id past what a JSON number holds exactly in every client.
        Value::String(digits) if digits.bytes().all(|b| b.is_ascii_digit()) => {
            digits.parse().ok().map(|id| ParentRef::Job(JobId(id)))
        }
        Value::Object(map) if map.len() == 1 => {
            if let Some(index) = map.get("index") {
                return index
                    .as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .map(ParentRef::Index);
            }
            map.get("step")
                .and_then(Value::as_str)
                .map(|step| ParentRef::Step(step.to_owned()))
        }
        _ => None,
    }
}

/// The stored jobs an `after` list names, for the scope check (it must be able to see each).
pub fn stored_ids(values: &[Value], field: &str) -> Result<Vec<JobId>, ApiError> {
    Ok(parse(values, field)?
        .into_iter()
        .filter_map(|p| match p {
            ParentRef::Job(id) => Some(id),
            _ => None,
        })
        .collect())
}

/// One job of a batch as [`plan`] reads it: its `step`, if named, and its parents.
#[derive(Debug, Clone, Default)]
pub struct Planned {
    pub step: Option<String>,
    pub after: Vec<ParentRef>,
}

/// The order to store a batch in (positions of the request, parents first, otherwise as
/// given), and each job's parents in that order's terms. Refuses a step named twice, a
/// reference to no job of the batch, and a cycle.
pub fn plan(jobs: &[Planned]) -> Result<(Vec<usize>, Vec<Vec<After>>), ApiError> {
    let mut steps: HashMap<&str, usize> = HashMap::new();
    for (i, job) in jobs.iter().enumerate() {
        if let Some(step) = &job.step {
            if let Some(first) = steps.insert(step.as_str(), i) {
                return Err(ApiError::invalid(
                    format!("jobs[{i}].step"),
                    format!("repeats the step of jobs[{first}] ({step:?}): steps name one job"),
                ));
            }
        }
    }
    // Each job's parents within the batch, by request position.
    let mut within: Vec<Vec<usize>> = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        let mut parents = Vec::new();
        for (position, parent) in job.after.iter().enumerate() {
            let field = || format!("jobs[{i}].after[{position}]");
            let at = match parent {
                ParentRef::Job(_) => continue,
                ParentRef::Index(at) if *at < jobs.len() => *at,
                ParentRef::Index(at) => {
                    return Err(ApiError::invalid(
                        field(),
                        format!("names jobs[{at}], but the batch has {} jobs", jobs.len()),
                    ));
                }
                ParentRef::Step(step) => *steps.get(step.as_str()).ok_or_else(|| {
                    ApiError::invalid(field(), format!("no job of the batch has step {step:?}"))
                })?,
            };
            if parents.contains(&at) {
                return Err(ApiError::invalid(
                    field(),
                    format!("names jobs[{at}] again: name each job once"),
                ));
            }
            parents.push(at);
        }
        within.push(parents);
    }
    let order = topological(&within).map_err(|cycle| {
        let path: Vec<String> = cycle.iter().map(|i| format!("jobs[{i}]")).collect();
        ApiError::invalid(
            format!("jobs[{}].after", cycle[0]),
            format!(
                "forms a cycle: {} (each waits for the next)",
                path.join(" → ")
            ),
        )
    })?;
    let mut placed = vec![0; jobs.len()];
    for (at, i) in order.iter().enumerate() {
        placed[*i] = at;
    }
    let afters = order
        .iter()
        .map(|&i| {
            jobs[i]
                .after
                .iter()
                .map(|parent| match parent {
                    ParentRef::Job(id) => After::Job(*id),
                    ParentRef::Index(at) => After::Earlier(placed[*at]),
                    ParentRef::Step(step) => After::Earlier(placed[steps[step.as_str()]]),
                })
                .collect()
        })
        .collect();
    Ok((order, afters))
}

/// Kahn's algorithm, taking the lowest ready position each time, so a batch already in order
/// keeps it. `Err` holds a cycle: positions each waiting for the next, the first repeated last.
fn topological(parents: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = parents.len();
    let mut pending: Vec<usize> = parents.iter().map(Vec::len).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (child, of) in parents.iter().enumerate() {
        for parent in of {
            children[*parent].push(child);
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|i| pending[*i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(next) = ready.pop_first() {
        order.push(next);
        for child in &children[next] {
            pending[*child] -= 1;
            if pending[*child] == 0 {
                ready.insert(*child);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Every job left waits for another one left: follow them until one repeats.
    let start = (0..n).find(|i| pending[*i] > 0).unwrap_or(0);
    let mut path = vec![start];
    loop {
        let last = path[path.len() - 1];
        let Some(next) = parents[last].iter().copied().find(|p| pending[*p] > 0) else {
            return Err(path);
        };
        if let Some(at) = path.iter().position(|p| *p == next) {
            let mut cycle = path.split_off(at);
            cycle.push(next);
            return Err(cycle);
        }
        path.push(next);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn planned(after: Value, step: Option<&str>) -> Planned {
        Planned {
            step: step.map(str::to_owned),
            after: parse(after.as_array().unwrap(), "after").unwrap(),
        }
    }

    #[test]
    fn items_are_ids_indexes_or_steps_and_bad_ones_are_named() {
        let parsed = parse(
            json!([7, "18446744073709551615", {"index": 2}, {"step": "load"}])
                .as_array()
                .unwrap(),
            "after",
        )
        .unwrap();
        assert_eq!(
            parsed,
            [
                ParentRef::Job(JobId(7)),
                ParentRef::Job(JobId(u64::MAX)),
                ParentRef::Index(2),
                ParentRef::Step("load".into())
            ]
        );
        for bad in [
            json!([-1]),
            json!([1.5]),
            json!(["+3"]),
            json!(["99999999999999999999"]),
            json!([{"index": "2"}]),
            json!([{"id": 2}]),
            json!([null]),
        ] {
            let error = parse(bad.as_array().unwrap(), "jobs[3].after").unwrap_err();
            assert_eq!(error.field.as_deref(), Some("jobs[3].after[0]"), "{bad}");
        }
        let error = parse(json!([4, 4]).as_array().unwrap(), "after").unwrap_err();
        assert_eq!(error.field.as_deref(), Some("after[1]"));
    }

    #[test]
    fn a_batch_is_stored_parents_first_and_keeps_its_order_otherwise() {
        // 0 waits for 2 (a step); 1 for nothing; 2 for 1.
        let jobs = [
            planned(json!([{"step": "c"}]), None),
            planned(json!([5]), Some("b")),
            planned(json!([{"index": 1}]), Some("c")),
        ];
        let (order, afters) = plan(&jobs).unwrap();
        assert_eq!(order, [1, 2, 0]);
        assert_eq!(
            afters,
            [
                vec![After::Job(JobId(5))],
                vec![After::Earlier(0)],
                vec![After::Earlier(1)]
            ]
        );
        let (order, _) = plan(&[planned(json!([]), None), planned(json!([]), None)]).unwrap();
        assert_eq!(order, [0, 1]);
    }

    #[test]
    fn cycles_and_dangling_references_are_refused_by_name() {
        let cycle = [
            planned(json!([]), None),
            planned(json!([{"index": 3}]), None),
            planned(json!([{"index": 1}]), None),
            planned(json!([{"index": 2}, {"index": 0}]), None),
        ];
        let error = plan(&cycle).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("jobs[1].after"));
        assert!(
            error
                .message
                .contains("jobs[1] → jobs[3] → jobs[2] → jobs[1]"),
            "{}",
            error.message
        );
        let own = plan(&[planned(json!([{"index": 0}]), None)]).unwrap_err();
        assert!(own.message.contains("jobs[0] → jobs[0]"), "{}", own.message);
        let far = plan(&[planned(json!([{"index": 1}]), None)]).unwrap_err();
        assert_eq!(far.field.as_deref(), Some("jobs[0].after[0]"));
        let unnamed = plan(&[planned(json!([{"step": "x"}]), None)]).unwrap_err();
        assert_eq!(unnamed.field.as_deref(), Some("jobs[0].after[0]"));
        let twice =
            plan(&[planned(json!([]), Some("a")), planned(json!([]), Some("a"))]).unwrap_err();
        assert_eq!(twice.field.as_deref(), Some("jobs[1].step"));
    }
}
