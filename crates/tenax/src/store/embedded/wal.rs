//! The write-ahead log: the embedded store's durability. A commit is one record appended to the
//! log and synced (one `fdatasync` of a few pages, for however many requests share the commit);
//! the redb file is updated behind it without syncing, and made durable now and then by a
//! checkpoint, after which the log starts over.
//!
//! The file, `tenax.wal`, is written once with zeros to its full size when made, so that a sync
//! never has to write the file's size or allocate blocks: it writes the record's pages only.
//! Records follow each other from offset 0:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | payload length, little-endian (never 0) |
//! | 4 | CRC-32 of the next 8 bytes and the payload |
//! | 8 | log sequence number (LSN), little-endian: one more than the record before |
//! | n | payload: the commit's ops (`ops`) |
//!
//! Reading stops at the first record whose length, checksum or number does not fit: the end of
//! what was written (zeros, or a record cut short by a crash, which was never acknowledged), or
//! records left from before the last checkpoint (lower numbers). The redb file says which
//! record it has applied last (`wal_lsn` in `meta`); at open, the records after it are applied
//! again, in order, on the file as the checkpoint left it. A log that lacks the record right
//! after that one has lost acknowledged commits, and the store refuses to open.

use std::io;

use super::disk::LogFile;
use crate::store::StoreError;

/// Bytes before a record's payload.
const HEADER_LEN: usize = 16;
const HEADER: u64 = HEADER_LEN as u64;

/// The size the log is made with by default. A checkpoint is due well before it fills; a commit
/// larger than what is left makes one at once, and one larger than the whole file grows it.
pub const CAPACITY: u64 = 16 * 1024 * 1024;

/// A record found at open: its number and payload.
pub type Record = (u64, Vec<u8>);

#[derive(Debug)]
pub struct Wal {
    file: Box<dyn LogFile>,
    /// Where the next record goes.
    offset: u64,
    /// The number of the next record.
    next_lsn: u64,
    /// The file's size.
    capacity: u64,
    /// The record being written, kept to reuse its allocation.
    buffer: Vec<u8>,
}

fn checksum(lsn: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&lsn.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

fn corrupt(message: String) -> StoreError {
    StoreError::Corrupt(format!("the write-ahead log (tenax.wal): {message}"))
}

impl Wal {
    /// Opens the log (making it `capacity` bytes if it is new or smaller) and returns it with
    /// the records after `applied`, the last one the redb file has, in order: the commits to
    /// apply again. The next record goes at the end of those; once they are applied and
    /// checkpointed, call [`Wal::reset`].
    pub fn open(
        file: Box<dyn LogFile>,
        applied: u64,
        capacity: u64,
    ) -> Result<(Self, Vec<Record>), StoreError> {
        let io = |what: &str| {
            let what = format!("the write-ahead log: {what}");
            move |e: io::Error| StoreError::storage(what, e)
        };
        let len = file.size().map_err(io("reading its size"))?;
        if len < capacity {
            zero_fill(&*file, len, capacity).map_err(io("making it"))?;
        }
        let capacity = len.max(capacity);
        let mut records: Vec<Record> = Vec::new();
        let mut offset = 0;
        let mut previous: Option<u64> = None;
        let mut header = [0u8; HEADER_LEN];
        while offset + HEADER <= capacity {
            file.read_at(offset, &mut header)
                .map_err(io("reading a record"))?;
            let length = u64::from(u32::from_le_bytes(
                header[0..4].try_into().unwrap_or_default(),
            ));
            let crc = u32::from_le_bytes(header[4..8].try_into().unwrap_or_default());
            let lsn = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default());
            if length == 0 || offset + HEADER + length > capacity {
                break;
            }
            if previous.is_some_and(|p| lsn != p + 1) {
                break;
            }
            let Ok(length_bytes) = usize::try_from(length) else {
                break;
            };
            let mut payload = vec![0u8; length_bytes];
            file.read_at(offset + HEADER, &mut payload)
                .map_err(io("reading a record"))?;
            if checksum(lsn, &payload) != crc {
                break;
            }
            previous = Some(lsn);
            offset += HEADER + length;
            if lsn > applied {
                records.push((lsn, payload));
            }
        }
        if let Some((first, _)) = records.first() {
            if *first != applied + 1 {
                return Err(corrupt(format!(
                    "the store has applied record {applied}, but the log goes on from record \
                     {first}: records {} to {} are missing",
                    applied + 1,
                    first - 1
                )));
            }
        }
        let next_lsn = previous.unwrap_or(0).max(applied) + 1;
        Ok((
            Self {
                file,
                // Records at or before `applied` are in the redb file: they may be written over.
                offset: if records.is_empty() { 0 } else { offset },
                next_lsn,
                capacity,
                buffer: Vec::new(),
            },
            records,
        ))
    }

    /// The number the next record gets.
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Whether a record of `payload` bytes fits after the ones since the last reset.
    pub fn fits(&self, payload: usize) -> bool {
        self.offset + HEADER + payload as u64 <= self.capacity
    }

    /// Bytes written since the last reset.
    pub fn used(&self) -> u64 {
        self.offset
    }

    /// Writes `payload` as the next record (not synced). Call [`Wal::fits`] first: a record
    /// that does not fit grows the file, which only a first record should have to do.
    pub fn append(&mut self, payload: &[u8]) -> io::Result<u64> {
        let lsn = self.next_lsn;
        let length = u32::try_from(payload.len()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "a commit of 4 GiB or more")
        })?;
        let end = self.offset + HEADER + payload.len() as u64;
        if end > self.capacity {
            zero_fill(&*self.file, self.capacity, end)?;
            self.capacity = end;
        }
        self.buffer.clear();
        self.buffer.extend_from_slice(&length.to_le_bytes());
        self.buffer
            .extend_from_slice(&checksum(lsn, payload).to_le_bytes());
        self.buffer.extend_from_slice(&lsn.to_le_bytes());
        self.buffer.extend_from_slice(payload);
        self.file.write_at(self.offset, &self.buffer)?;
        self.offset = end;
        self.next_lsn += 1;
        Ok(lsn)
    }

    /// Makes every record written so far durable.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync()
    }

    /// Starts over at the beginning: every record so far is in a durable redb commit.
    pub fn reset(&mut self) {
        self.offset = 0;
    }
}

/// Writes zeros from `from` to `to` and syncs, so that later writes in that range overwrite
/// allocated blocks.
fn zero_fill(file: &dyn LogFile, from: u64, to: u64) -> io::Result<()> {
    const CHUNK: usize = 1024 * 1024;
    let zeros = vec![0u8; CHUNK];
    let mut at = from;
    while at < to {
        let n = usize::try_from(to - at).map_or(CHUNK, |left| left.min(CHUNK));
        file.write_at(at, &zeros[..n])?;
        at += n as u64;
    }
    file.sync()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::disk::SimulatedDisk;

    const SMALL: u64 = 64 * 1024;

    fn open(disk: &SimulatedDisk, applied: u64) -> (Wal, Vec<Record>) {
        Wal::open(Box::new(disk.file("tenax.wal")), applied, SMALL).unwrap()
    }

    #[test]
    fn records_after_the_applied_one_come_back_in_order() {
        let disk = SimulatedDisk::new();
        let (mut wal, records) = open(&disk, 0);
        assert!(records.is_empty());
        for payload in [&b"one"[..], b"two", b"three"] {
            wal.append(payload).unwrap();
        }
        wal.sync().unwrap();
        let (_, records) = open(&disk.reboot(|_, _| false), 1);
        assert_eq!(records, [(2, b"two".to_vec()), (3, b"three".to_vec())]);
    }

    #[test]
    fn an_unsynced_or_torn_record_ends_the_log() {
        let disk = SimulatedDisk::new();
        let (mut wal, _) = open(&disk, 0);
        wal.append(b"kept").unwrap();
        wal.sync().unwrap();
        wal.append(&[7u8; 10_000]).unwrap();
        // Lost entirely, or only some of its pages reached the disk: either way it ends there.
        for keep in [false, true] {
            let mut first = true;
            let after = disk.reboot(|_, _| {
                let k = keep && first;
                first = false;
                k
            });
            let (wal, records) = open(&after, 0);
            assert_eq!(records, [(1, b"kept".to_vec())]);
            assert_eq!(wal.next_lsn(), 2);
        }
    }

    #[test]
    fn after_a_reset_older_records_are_not_read_again() {
        let disk = SimulatedDisk::new();
        let (mut wal, _) = open(&disk, 0);
        wal.append(&[1u8; 100]).unwrap();
        wal.append(&[2u8; 100]).unwrap();
        wal.sync().unwrap();
        // Checkpointed through record 2: start over, with a shorter record.
        wal.reset();
        wal.append(b"three").unwrap();
        wal.sync().unwrap();
        let (wal, records) = open(&disk.reboot(|_, _| false), 2);
        assert_eq!(records, [(3, b"three".to_vec())]);
        assert_eq!(wal.next_lsn(), 4);
        // Nothing after the checkpoint: nothing to apply, and numbers go on.
        let (wal, records) = open(&disk.reboot(|_, _| false), 3);
        assert!(records.is_empty());
        assert_eq!(wal.next_lsn(), 4);
    }

    #[test]
    fn a_missing_record_refuses_to_open() {
        // The store applied record 5; a log that goes on from record 7 lost record 6.
        let disk = SimulatedDisk::new();
        let (mut wal, _) = open(&disk, 5);
        wal.next_lsn = 7;
        wal.append(b"seven").unwrap();
        wal.sync().unwrap();
        let error = Wal::open(Box::new(disk.file("tenax.wal")), 5, SMALL).unwrap_err();
        assert!(
            error.to_string().contains("records 6 to 6 are missing"),
            "{error}"
        );
    }

    #[test]
    fn a_record_larger_than_the_file_grows_it() {
        let disk = SimulatedDisk::new();
        let (mut wal, _) = open(&disk, 0);
        let big = vec![9u8; usize::try_from(SMALL).unwrap() + 10];
        assert!(!wal.fits(big.len()));
        wal.append(&big).unwrap();
        wal.sync().unwrap();
        let (_, records) = open(&disk.reboot(|_, _| false), 0);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].1.len(), big.len());
    }
}
