//! A damaged write-ahead log never opens as a shorter one. The real store writes acknowledged
//! jobs (one enqueue per commit, so one job per log record) on a simulated disk whose power is
//! cut right after the last acknowledgement; what survived is written out as real files, and
//! each case of the matrix damages a copy: bits changed in every field of the first, a middle
//! and the last record, in every record's payload, in the header page and the page headers;
//! the file cut at every record boundary and inside records; pages zeroed; the log scribbled,
//! cut to nothing, deleted. The real store then opens the directory, and either every
//! acknowledged job is there, or it refuses, naming the file, the byte offset and how many
//! readable records follow the damage. Every refused case is repaired (`repair`): the store
//! then opens, the damaged log's copy is there, and the jobs missing are exactly those of the
//! records the report says are lost.
//!
//! Also: `tenax serve` refuses such a directory and `tenax repair` brings it back (the real
//! binary), and a data directory written by the release before the log's format 2 opens.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::value::RawValue;
use tenax_core::model::{JobId, NewJob, OnDuplicate};
use tenax_core::store::{Insert, JobReads as _, Store, StoreError, StoreLifecycle as _};
use tenax_embedded::disk::SimulatedDisk;
use tenax_embedded::repair::{self, Report};
use tenax_embedded::{EmbeddedOptions, EmbeddedStore};

const T0: u64 = 1_700_000_000_000;
const BIN: &str = env!("CARGO_BIN_EXE_tenax");

/// The log's layout, as `wal`'s module doc gives it.
const PAGE: usize = 4096;
const PAGE_HEADER: usize = 24;
const DATA: usize = PAGE - PAGE_HEADER;
const RECORD_HEADER: usize = 20;

/// A log of a header page and seven pages of records: the jobs fill it once, so the records
/// after its last checkpoint lie before older ones.
fn options() -> EmbeddedOptions {
    EmbeddedOptions {
        cache_bytes: 1 << 20,
        log_bytes: 8 * PAGE as u64,
        ..EmbeddedOptions::default()
    }
}

/// The file offset of position `pos` of the records' stream.
fn offset_of(pos: usize) -> usize {
    (1 + pos / DATA) * PAGE + PAGE_HEADER + pos % DATA
}

fn stream(bytes: &[u8], pos: usize, len: usize) -> Option<Vec<u8>> {
    (pos..pos + len)
        .map(|p| bytes.get(offset_of(p)).copied())
        .collect()
}

/// A record of the log: its number, and its place in the stream.
#[derive(Debug, Clone, Copy)]
struct Record {
    lsn: u64,
    pos: usize,
    size: usize,
}

impl Record {
    /// The file offset of its `n`th byte (header included).
    fn at(&self, n: usize) -> usize {
        offset_of(self.pos + n)
    }
}

/// The records from the start of the stream, numbered one after the other: the ones after the
/// store file's last checkpoint.
fn records(bytes: &[u8]) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    let mut pos = 0;
    while let Some(header) = stream(bytes, pos, RECORD_HEADER) {
        let length = u32::from_le_bytes(header[0..4].try_into().unwrap()) as usize;
        let lsn = u64::from_le_bytes(header[4..12].try_into().unwrap());
        let crc = u32::from_le_bytes(header[12..16].try_into().unwrap());
        let follows = out.last().is_none_or(|r| r.lsn + 1 == lsn);
        let Some(payload) = stream(bytes, pos + RECORD_HEADER, length) else {
            break;
        };
        if length == 0 || !follows || crc32fast::hash(&payload) != crc {
            break;
        }
        out.push(Record {
            lsn,
            pos,
            size: RECORD_HEADER + length,
        });
        pos += RECORD_HEADER + length;
    }
    out
}

fn insert(marker: u64) -> Insert {
    Insert {
        job: NewJob {
            queue: "q".to_owned(),
            kind: "work".to_owned(),
            payload: RawValue::from_string(format!("{{\"marker\":{marker}}}")).unwrap(),
            priority: 0,
            run_at_ms: T0,
            policy: None,
            unique_key: None,
            created_at_ms: T0,
            expires_at_ms: None,
            origin: None,
            parent: None,
            traceparent: None,
            payload_sealed: false,
            after: Vec::new(),
            on_parent_dead: Default::default(),
            batch: None,
        },
        parent: None,
        owner: None,
        after: Vec::new(),
    }
}

fn marker_of(raw: &RawValue) -> u64 {
    let value: serde_json::Value = serde_json::from_str(raw.get()).unwrap();
    value["marker"].as_u64().unwrap()
}

/// The data directory after a power cut right after the last of `count` acknowledged
/// enqueues, and the jobs acknowledged, in order: (id, marker).
struct Base {
    dir: tempfile::TempDir,
    acked: Vec<(JobId, u64)>,
    log: Vec<u8>,
    /// The records after the last checkpoint; record `i` holds job `acked[first_job + i]`.
    records: Vec<Record>,
    first_job: usize,
}

async fn base(count: u64) -> Base {
    let disk = SimulatedDisk::new();
    let store: Arc<dyn Store> =
        Arc::new(EmbeddedStore::open_simulated(&disk, &options(), T0).expect("a new store"));
    let mut acked = Vec::new();
    // At least `count` jobs (they fill the log, so older records lie past the newer ones),
    // and on until 20 records follow the last checkpoint (one is due every second too).
    for marker in 1..=count + 10_000 {
        // One at a time: each enqueue is a commit of its own, a record of its own.
        let enqueued = store
            .insert_jobs(
                vec![insert(marker)],
                OnDuplicate::Refuse,
                Default::default(),
                T0,
            )
            .await
            .expect("acknowledged");
        let id = enqueued[0].as_ref().expect("stored").id;
        acked.push((id, marker));
        if marker >= count && records(&disk.contents("tenax.wal").unwrap()).len() >= 20 {
            break;
        }
    }
    let survived = disk.reboot(|_, _| false);
    store.close().await;
    let dir = tempfile::tempdir().unwrap();
    let log = survived.contents("tenax.wal").unwrap();
    std::fs::write(
        dir.path().join("tenax.redb"),
        survived.contents("tenax.redb").unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("tenax.wal"), &log).unwrap();
    // The key that seals the store's secrets goes with it (the store names it).
    std::fs::write(
        dir.path().join("secrets.key"),
        survived.contents("secrets.key").unwrap(),
    )
    .unwrap();
    let records = records(&log);
    assert!(
        records.len() >= 20,
        "{} records after the last checkpoint",
        records.len()
    );
    let first_job = acked.len() - records.len();
    Base {
        dir,
        acked,
        log,
        records,
        first_job,
    }
}

/// A copy of the base directory with the log replaced by `log` (`None`: deleted).
fn damaged(base: &Base, log: Option<Vec<u8>>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        base.dir.path().join("tenax.redb"),
        dir.path().join("tenax.redb"),
    )
    .unwrap();
    std::fs::copy(
        base.dir.path().join("secrets.key"),
        dir.path().join("secrets.key"),
    )
    .unwrap();
    if let Some(log) = log {
        std::fs::write(dir.path().join("tenax.wal"), log).unwrap();
    }
    dir
}

/// The acknowledged jobs missing from the store in `dir`; panics on a job with another payload.
async fn missing(dir: &Path, acked: &[(JobId, u64)]) -> Result<BTreeSet<JobId>, StoreError> {
    let store = EmbeddedStore::open(dir, &options(), T0)?;
    let mut missing = BTreeSet::new();
    for (id, marker) in acked {
        match store.get_job(*id).await.expect("readable") {
            Some(job) => assert_eq!(marker_of(&job.spec.payload), *marker, "job {id}"),
            None => {
                missing.insert(*id);
            }
        }
    }
    store.close().await;
    Ok(missing)
}

/// What a case expects when the store refuses: words the message must hold.
struct Case {
    what: String,
    log: Option<Vec<u8>>,
    expect: Vec<String>,
}

fn case(what: impl Into<String>, log: Option<Vec<u8>>) -> Case {
    Case {
        what: what.into(),
        log,
        expect: Vec::new(),
    }
}

fn flipped(log: &[u8], at: usize, bit: u8) -> Vec<u8> {
    let mut log = log.to_vec();
    log[at] ^= 1 << bit;
    log
}

fn follow(n: usize, first: u64) -> String {
    match n {
        0 => "no readable record follows it".to_owned(),
        1 => format!("1 readable record follows it (record {first})"),
        n => format!(
            "{n} readable records follow it (records {first} to {})",
            first + n as u64 - 1
        ),
    }
}

fn cases(base: &Base) -> Vec<Case> {
    let log = &base.log;
    let records = &base.records;
    let n = records.len();
    let mut cases = Vec::new();
    // Every record: a bit of its payload (it alone is damaged), and the file cut where it
    // starts.
    for (i, record) in records.iter().enumerate() {
        let mut c = case(
            format!("record {} payload", record.lsn),
            Some(flipped(
                log,
                record.at(RECORD_HEADER + (record.size - RECORD_HEADER) / 2),
                3,
            )),
        );
        c.expect = vec![
            format!("record {} at byte {}", record.lsn, record.at(0)),
            follow(n - i - 1, record.lsn + 1),
        ];
        cases.push(c);
        let mut c = case(
            format!("cut where record {} starts", record.lsn),
            Some(log[..record.at(0)].to_vec()),
        );
        c.expect = vec![format!("cut at byte {}", record.at(0))];
        cases.push(c);
    }
    // The first, a middle and the last record: every field of the header, the payload's ends,
    // a cut inside, its page zeroed.
    for i in [0, n / 2, n - 1] {
        let record = records[i];
        for (field, at) in [
            ("length", 0),
            ("number", 5),
            ("payload CRC", 13),
            ("header CRC", 17),
        ] {
            let mut c = case(
                format!("record {} {field}", record.lsn),
                Some(flipped(log, record.at(at), 1)),
            );
            c.expect = vec![
                format!("record {} at byte {}", record.lsn, record.at(0)),
                follow(n - i - 1, record.lsn + 1),
            ];
            cases.push(c);
        }
        for (end, at) in [("first", RECORD_HEADER), ("last", record.size - 1)] {
            let mut c = case(
                format!("record {} payload's {end} byte", record.lsn),
                Some(flipped(log, record.at(at), 0)),
            );
            c.expect = vec![follow(n - i - 1, record.lsn + 1)];
            cases.push(c);
        }
        cases.push(case(
            format!("cut inside record {}", record.lsn),
            Some(log[..record.at(record.size / 2)].to_vec()),
        ));
        let page = record.at(record.size / 2) / PAGE;
        let mut zeroed = log.clone();
        zeroed[page * PAGE..(page + 1) * PAGE].fill(0);
        cases.push(case(
            format!("page {page} of record {} zeroed", record.lsn),
            Some(zeroed),
        ));
    }
    // Each page header's fields.
    for page in 1..log.len() / PAGE {
        for (field, at) in [("stamp", 0), ("synced", 9), ("first", 16), ("CRC", 21)] {
            cases.push(case(
                format!("page {page} header's {field}"),
                Some(flipped(log, page * PAGE + at, 2)),
            ));
        }
    }
    // Older records, past the last one: nothing of the store's is there.
    let last = records[n - 1];
    let end = last.at(last.size - 1) + 1;
    for at in [end + 1, end + 700, log.len() - 100] {
        cases.push(case(
            format!("byte {at}, past the records"),
            Some(flipped(log, at, 4)),
        ));
    }
    // The header page, and the file as a whole.
    for at in [0, 8, 12, 16, 24, 32, 40, 2000, 4095] {
        let mut c = case(format!("header byte {at}"), Some(flipped(log, at, 5)));
        c.expect = vec!["header".to_owned()];
        cases.push(c);
    }
    let mut scribbled = log.clone();
    for (i, byte) in scribbled[..PAGE].iter_mut().enumerate() {
        *byte = (i as u64 * 7 + 3).to_le_bytes()[0];
    }
    cases.push(case("the first 4 KiB scribbled", Some(scribbled)));
    let mut zeroed = log.clone();
    zeroed[..PAGE].fill(0);
    cases.push(case("the first 4 KiB zeroed", Some(zeroed)));
    for len in [0, 100, PAGE, log.len() - PAGE, log.len() - 1] {
        cases.push(case(
            format!("cut to {len} bytes"),
            Some(log[..len].to_vec()),
        ));
    }
    let mut c = case("deleted", None);
    c.expect = vec!["is missing".to_owned()];
    cases.push(c);
    cases
}

/// Checks a repaired directory: it opens, the copy is kept, and the jobs missing are the ones
/// of the records the report says are lost.
async fn check_repair(base: &Base, case: &Case, dir: &Path, report: &Report) {
    let what = &case.what;
    assert!(
        report.damage.is_some(),
        "{what}: the repair found nothing: {report:?}"
    );
    if let Some(log) = &case.log {
        let copy = report
            .copy
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: no copy"));
        assert_eq!(
            std::fs::read(copy).unwrap(),
            *log,
            "{what}: the copy is the damaged log"
        );
    }
    let missing = missing(dir, &base.acked)
        .await
        .unwrap_or_else(|e| panic!("{what}: the repaired store does not open: {e}"));
    let lsn_of_job: BTreeMap<JobId, u64> = base
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| (base.acked[base.first_job + i].0, r.lsn))
        .collect();
    for id in &missing {
        let lsn = lsn_of_job
            .get(id)
            .unwrap_or_else(|| panic!("{what}: job {id} was checkpointed, and is missing"));
        assert!(
            *lsn >= report.lost.from,
            "{what}: job {id} of record {lsn} is missing, but the report loses from record {}",
            report.lost.from
        );
    }
    let lost_jobs: BTreeSet<JobId> = lsn_of_job
        .iter()
        .filter(|(_, lsn)| **lsn >= report.lost.from)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(missing, lost_jobs, "{what}: jobs missing");
    match report.lost.count() {
        Some(count) => {
            let lost_here = base
                .records
                .iter()
                .filter(|r| r.lsn >= report.lost.from)
                .count();
            assert_eq!(count, lost_here as u64, "{what}: records lost");
            assert_eq!(
                report.lost.ops.enqueued.len() + report.lost.unreadable().len(),
                missing.len(),
                "{what}: the report's count (readable enqueues and unreadable records) against \
                 the jobs missing"
            );
            assert!(report.lost.ops.enqueued.is_subset(&missing), "{what}");
        }
        // The log is gone, cut, or has an unreadable page: the report says from where, and
        // no more than it shows.
        None => assert!(
            report.lost.through <= base.records.last().map_or(0, |r| r.lsn),
            "{what}: {:?}",
            report.lost
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_log_is_read_whole_or_refused_and_repair_loses_only_what_it_says() {
    let base = base(150).await;
    let mut opened = 0;
    let mut refused = 0;
    for case in cases(&base) {
        let dir = damaged(&base, case.log.clone());
        let what = &case.what;
        match missing(dir.path(), &base.acked).await {
            Ok(missing) => {
                assert!(
                    missing.is_empty(),
                    "{what}: the store opened without acknowledged jobs {missing:?}"
                );
                assert!(case.expect.is_empty(), "{what}: opened; it is damage");
                opened += 1;
            }
            Err(StoreError::Corrupt(message)) => {
                let log = dir.path().join("tenax.wal").display().to_string();
                assert!(
                    message.contains(&log),
                    "{what}: the file is not named: {message}"
                );
                assert!(
                    message.contains("byte ") && message.contains("tenax repair --data-dir"),
                    "{what}: {message}"
                );
                for words in &case.expect {
                    assert!(
                        message.contains(words),
                        "{what}: no {words:?} in: {message}"
                    );
                }
                let report = repair::repair(dir.path())
                    .unwrap_or_else(|e| panic!("{what}: the repair failed: {e}"));
                check_repair(&base, &case, dir.path(), &report).await;
                refused += 1;
            }
            Err(other) => panic!("{what}: {other}"),
        }
    }
    // Cases that opened touched nothing the store needed (older records, a page header of a
    // page no record past the checkpoint needs).
    assert!(
        refused >= 2 * base.records.len() && opened > 3,
        "refused {refused}, opened {opened}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intact_log_is_left_alone_by_repair() {
    let base = base(40).await;
    let before = std::fs::read(base.dir.path().join("tenax.wal")).unwrap();
    let report = repair::repair(base.dir.path()).expect("a repair");
    assert!(
        report.damage.is_none() && report.copy.is_none(),
        "{report:?}"
    );
    assert_eq!(
        std::fs::read(base.dir.path().join("tenax.wal")).unwrap(),
        before
    );
    assert!(
        missing(base.dir.path(), &base.acked)
            .await
            .expect("opens")
            .is_empty()
    );
}

fn run(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env("TENAX_LOG", "warn")
        .output()
        .expect("runs")
}

/// `tenax serve` refuses a damaged log with the file, offset and count, and starts once
/// `tenax repair` has run; the report counts the jobs that are missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_a_damaged_log_and_repair_brings_it_back() {
    let base = base(150).await;
    let n = base.records.len();
    let record = base.records[n / 2];
    let at = record.at(RECORD_HEADER + 3);
    let dir = damaged(&base, Some(flipped(&base.log, at, 6)));
    let refused = run(&["serve", "--listen", "127.0.0.1:0"], dir.path());
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let log: PathBuf = dir.path().join("tenax.wal");
    for words in [
        log.display().to_string(),
        format!("record {} at byte {}", record.lsn, record.at(0)),
        follow(n - n / 2 - 1, record.lsn + 1),
        "tenax repair --data-dir".to_owned(),
    ] {
        assert!(stderr.contains(&words), "no {words:?} in: {stderr}");
    }
    let repaired = run(&["repair"], dir.path());
    let stdout = String::from_utf8_lossy(&repaired.stdout);
    assert!(
        repaired.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&repaired.stderr)
    );
    let lost = n - n / 2;
    let last = base.records[n - 1].lsn;
    for words in [
        "The damaged log is kept as".to_owned(),
        format!("Lost: records {} to {last} ({lost})", record.lsn),
        format!("Cannot be read: {} (1 record)", record.lsn),
        format!("What those did: {} jobs enqueued", lost - 1),
    ] {
        assert!(stdout.contains(&words), "no {words:?} in: {stdout}");
    }
    let copies: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("tenax.wal.damaged-")
        })
        .collect();
    assert_eq!(copies.len(), 1, "one copy of the damaged log");
    let missing = missing(dir.path(), &base.acked).await.expect("it opens");
    assert_eq!(missing.len(), lost);
    // Nothing left to repair.
    let again = run(&["repair"], dir.path());
    assert!(String::from_utf8_lossy(&again.stdout).contains("is intact: nothing to repair"));
}

/// A data directory as the release before the log's format 2 left it after a kill -9 (store
/// format 3, a log of format 1 holding records past the last checkpoint; see
/// `tests/fixtures/format3-wal1/README.md`) opens with every job it acknowledged, and its log
/// is made again in format 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_of_the_previous_format_opens_with_every_job() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format3-wal1");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture.join("tenax.redb"), dir.path().join("tenax.redb")).unwrap();
    // The fixture keeps the log's written part; the release made it 16 MiB, the rest zeros.
    let mut log = std::fs::read(fixture.join("tenax.wal")).unwrap();
    log.resize(16 * 1024 * 1024, 0);
    std::fs::write(dir.path().join("tenax.wal"), &log).unwrap();
    let acked: Vec<(u64, u64, String)> =
        serde_json::from_slice(&std::fs::read(fixture.join("acked.json")).unwrap()).unwrap();
    let payload_n = |raw: &RawValue| {
        let value: serde_json::Value = serde_json::from_str(raw.get()).unwrap();
        value["n"].as_u64().unwrap()
    };
    for round in 0..2 {
        let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default(), T0)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        for (id, n, queue) in &acked {
            let job = store
                .get_job(JobId(*id))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("round {round}: job {id} is gone"));
            assert_eq!(payload_n(&job.spec.payload), *n);
            assert_eq!(&job.spec.queue, queue);
        }
        store.close().await;
        let head = std::fs::read(dir.path().join("tenax.wal")).unwrap();
        assert_eq!(
            &head[..8],
            b"TENAXWAL",
            "round {round}: the log is in format 2"
        );
    }
}
