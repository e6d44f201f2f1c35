//! Reading a log of format 1, which Tenax wrote before logs had a header (a store file without
//! `wal_id`): its records past the store file's last checkpoint are applied once, and the log
//! is then made again in format 2 (`wal`).
//!
//! Format 1: records from offset 0, each a 4-byte length (never 0), a CRC-32 of the next 8
//! bytes and the payload, an 8-byte number (one more than the record before) and the payload;
//! zeros, or records left from before the last checkpoint (lower numbers), after the last one.
//! Its writer synced each record before writing the next (in sync mode), so a crash tears at
//! most the last one; a record after the end that can be read and is numbered on from it
//! proves the end is damage. (Damage to the last record itself cannot be told from a torn
//! tail in this format: that is what format 2's page stamps are for.)

use std::collections::BTreeMap;

use super::scan::{End, FileDamage, Found, Scan, Why};

/// Bytes before a record's payload.
const HEADER: u64 = 16;

/// The record at `offset`, if it checks.
fn record_at(bytes: &[u8], offset: u64) -> Option<Found> {
    let start = usize::try_from(offset).ok()?;
    let header = bytes.get(start..start + 16)?;
    let length = u32::from_le_bytes(header[0..4].try_into().ok()?);
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let lsn = u64::from_le_bytes(header[8..16].try_into().ok()?);
    if length == 0 {
        return None;
    }
    let end = start
        .checked_add(16)?
        .checked_add(usize::try_from(length).ok()?)?;
    let payload = bytes.get(start + 16..end)?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[8..16]);
    hasher.update(payload);
    (hasher.finalize() == crc).then(|| Found {
        lsn,
        offset,
        end: end as u64,
        payload: payload.to_vec(),
    })
}

/// Reads a format 1 log for a store file that has applied every record up to `applied`.
pub fn scan(bytes: &[u8], applied: u64) -> Scan {
    // Records follow each other from offset 0, each numbered one more than the one before;
    // those past `applied` are the ones to apply.
    let mut records: Vec<Found> = Vec::new();
    let mut offset = 0u64;
    let mut previous: Option<u64> = None;
    while let Some(record) =
        record_at(bytes, offset).filter(|r| previous.is_none_or(|p| r.lsn == p + 1))
    {
        offset = record.end;
        previous = Some(record.lsn);
        if record.lsn > applied {
            records.push(record);
        }
    }
    let next = previous.map_or(applied, |p| p.max(applied)) + 1;
    let mut end = End::Clean { offset, lsn: next };
    if let Some(first) = records.first().filter(|r| r.lsn != applied + 1) {
        // The store file has applied `applied`, and the log goes on from a later record.
        end = End::Damaged {
            offset: first.offset,
            lsn: applied + 1,
            why: Why::Number { found: first.lsn },
        };
        let after = std::mem::take(&mut records);
        return finish(bytes, records, end, applied, after);
    }
    let after = later_records(bytes, offset, next);
    if let Some(later) = after.first() {
        end = End::Damaged {
            offset,
            lsn: next,
            why: Why::Later {
                lsn: later.lsn,
                offset: later.offset,
            },
        };
    }
    finish(bytes, records, end, applied, after)
}

fn finish(bytes: &[u8], records: Vec<Found>, end: End, applied: u64, after: Vec<Found>) -> Scan {
    let last = |found: &[Found]| found.iter().map(|r| r.lsn).max().unwrap_or(0);
    let written = applied.max(last(&records)).max(last(&after));
    Scan {
        records,
        end,
        written,
        file: (bytes.is_empty() && applied > 0).then_some(FileDamage::Missing),
        after,
        unreadable_pages: Vec::new(),
    }
}

/// The records numbered `lsn` or later that can be read anywhere after `offset`, and the ones
/// that follow each.
fn later_records(bytes: &[u8], offset: u64, lsn: u64) -> Vec<Found> {
    let len = bytes.len() as u64;
    // Each record takes more than a header: no later record can be numbered higher than this.
    let highest = lsn + len / HEADER;
    let mut found: BTreeMap<u64, Found> = BTreeMap::new();
    let mut at = offset + 1;
    while at + HEADER <= len {
        let Some(number) = usize::try_from(at + 8)
            .ok()
            .and_then(|i| bytes.get(i..i + 8))
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
        else {
            break;
        };
        if !(lsn..=highest).contains(&number) {
            at += 1;
            continue;
        }
        match record_at(bytes, at) {
            Some(record) => {
                at = record.end;
                found.insert(record.lsn, record);
            }
            None => at += 1,
        }
    }
    found.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(lsn: u64, payload: &[u8]) -> Vec<u8> {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&lsn.to_le_bytes());
        hasher.update(payload);
        let mut out = Vec::new();
        out.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
        out.extend_from_slice(&hasher.finalize().to_le_bytes());
        out.extend_from_slice(&lsn.to_le_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn log(records: &[(u64, &[u8])]) -> Vec<u8> {
        let mut bytes: Vec<u8> = records.iter().flat_map(|(n, p)| record(*n, p)).collect();
        bytes.resize(4096, 0);
        bytes
    }

    #[test]
    fn records_past_the_checkpoint_are_read_in_order() {
        let bytes = log(&[(4, b"four"), (5, b"five"), (6, b"six")]);
        let scan = scan(&bytes, 4);
        let numbers: Vec<u64> = scan.records.iter().map(|r| r.lsn).collect();
        assert_eq!(numbers, [5, 6]);
        assert!(scan.is_intact());
        assert_eq!(scan.written, 6);
        assert_eq!(scan.end, End::Clean { offset: 59, lsn: 7 });
    }

    #[test]
    fn a_bad_record_followed_by_a_readable_one_is_damage() {
        let mut bytes = log(&[(1, b"one"), (2, b"two"), (3, b"three")]);
        bytes[19 + 16] ^= 1; // record 2's payload
        let scan = scan(&bytes, 0);
        assert_eq!(scan.records.len(), 1);
        assert_eq!(
            scan.end,
            End::Damaged {
                offset: 19,
                lsn: 2,
                why: Why::Later { lsn: 3, offset: 38 }
            }
        );
        assert_eq!(scan.after.len(), 1);
        assert_eq!(scan.written, 3);
    }

    #[test]
    fn a_gap_after_the_checkpoint_is_damage_and_a_missing_log_is_refused() {
        let scan = scan(&log(&[(7, b"seven")]), 5);
        assert!(matches!(
            scan.end,
            End::Damaged {
                lsn: 6,
                why: Why::Number { found: 7 },
                ..
            }
        ));
        let empty = super::scan(&[], 5);
        assert_eq!(empty.file, Some(FileDamage::Missing));
        assert!(
            super::scan(&[], 0).is_intact(),
            "a new store has no log yet"
        );
    }
}
