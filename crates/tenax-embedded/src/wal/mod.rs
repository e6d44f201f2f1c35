//! The write-ahead log: the embedded store's durability. A commit is one record appended to the
//! log and synced (one `fdatasync` of a few pages, for however many requests share the commit);
//! the redb file is updated behind it without syncing, and made durable now and then by a
//! checkpoint, after which the log starts over from its beginning.
//!
//! # The file, `tenax.wal` (format 2)
//!
//! It is written once at its full size when made, so that a sync never has to write the file's
//! size or allocate blocks: it writes the record's pages only. It is a row of 4 KiB pages
//! (`format`):
//!
//! - **Page 0, the header**, written once: `TENAXWAL`, the format (2), the page size, the
//!   log's identity (a random number that the redb file keeps as `wal_id` in `meta`), the size
//!   the file was made with, the number of the last record the store had settled when it was
//!   made (`base`: the log's first record is `base + 1`), and a CRC-32 of the whole page.
//! - **Every other page** starts with a 24-byte header: its *stamp*, the number of the last
//!   record written into it (0: none since the log was made); its *synced* mark: every record
//!   up to this number was durable (synced, or checkpointed) when the page was last written;
//!   where the first record that starts in it since the last checkpoint starts (0: none); and
//!   a CRC-32 of these with the log's identity and the page's number. A page of zeros does not
//!   check: every page gets a header when the log is made.
//! - **Records** fill the rest of the pages one after the other from page 1, a record going on
//!   into the next page where its page ends:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | payload length, little-endian (never 0) |
//! | 8 | log sequence number (LSN), little-endian: one more than the record before |
//! | 4 | CRC-32 of the payload |
//! | 4 | CRC-32 of the log's identity and the 16 bytes before |
//! | n | payload: the commit's ops (`ops`) |
//!
//! An append writes the pages its record lies in from the start of the first one (the bytes
//! already there again, unchanged), each with its header stamped with the record's number.
//!
//! # Invariants
//!
//! 1. **One record in flight, in sync mode.** The writer syncs each record before it writes
//!    the next (`writer`: one committer, and a commit returns after its sync), so a crash can
//!    tear only the last record written, which was never acknowledged. In relaxed mode every
//!    record since the last sync may be torn or lost, which that mode declares; each page's
//!    synced mark says which records were durable.
//! 2. **A record number is never used twice in a log.** At open the next number is past the
//!    highest the log shows was written (the pages' stamps included), and the redb file's
//!    `wal_lsn` is raised to it, durably, before anything new is written. So a page's stamp
//!    tells which write reached it last: a stamp lower than a record's is from before it.
//! 3. **A disk writes a page whole or not at all** (the assumption; the simulated disk tears
//!    writes at this unit). A record cut by a crash therefore leaves one of its pages with a
//!    stamp older than the record.
//! 4. **The redb file says what the log must hold**: `wal_lsn` is the last record applied
//!    (durable at each checkpoint), `wal_id` the log it goes with. The log holds every
//!    acknowledged record past `wal_lsn`, from the start of page 1, and its stamps have reached
//!    `wal_lsn` (or its `base` has).
//!
//! # Reading at open (`scan`)
//!
//! The records past `wal_lsn` are read from the start, in order, while each checks and is
//! numbered one more than the one before. What stops them is one of:
//!
//! - **the end**: nothing numbered from there on was written;
//! - **a torn tail**: a page of the next record has an older stamp (invariant 3), and no page
//!   written later says that record was synced. It was never acknowledged; it is dropped, with
//!   any record written after it (relaxed mode only: in sync mode there is none);
//! - **damage**, in every other case: a page written later says the record had been synced
//!   (invariant 1); every page of it was written with it and it still does not check; a page
//!   header it lies in does not check; another record is in its place; it runs past the end of
//!   the file.
//!
//! The file itself is damaged if it is missing or empty while the redb file has a log, if its
//! header does not check (a scribbled first page), if it is another log (`wal_id` differs), if
//! it is shorter than it was made, or if it never reached `wal_lsn` (an older copy).
//!
//! On damage the store refuses to open, naming the file, the byte offset and how many records
//! that can still be read follow the damage; `tenax repair` (`repair`) is the way on, and
//! nothing repairs on its own.
//!
//! What this cannot tell: damage that leaves a page of the last record exactly as an older
//! intact write of it (a disk that silently drops a write) reads as a torn tail. A write torn
//! inside a page (a disk that does not write 4 KiB whole) reads as damage: the server refuses
//! to start instead of dropping it, and repair loses that one record, never acknowledged.
//!
//! A log of format 1 (records from offset 0, no header: before `wal_id`) is read once by
//! `legacy`, and made again in this format once its records are applied.

mod format;
mod legacy;
pub mod scan;

use std::io;

use self::format::{
    LogHeader, PAGE, PAGE_LEN, PageHeader, RecordHeader, offset_of, page_of, size_for, stream_len,
};
use self::scan::{End, FileDamage, Found, Scan};
use super::disk::LogFile;

/// The size the log is made with by default. A checkpoint is due well before it fills; a commit
/// larger than what is left makes one at once, and one larger than the whole file grows it.
pub const CAPACITY: u64 = 16 * 1024 * 1024;

/// What the log holds, as read at open.
#[derive(Debug)]
pub struct Reading {
    pub scan: Scan,
    /// The log is in this format and is the store's own: it goes on being written. Otherwise
    /// (a new store, a format 1 log, or a log made but not yet recorded in the redb file) it is
    /// made again once its records are applied.
    pub current: bool,
}

/// Reads the whole log for a store whose redb file has applied every record up to `applied`
/// and names log `id` (`None`: it has never named one).
pub fn read(file: &dyn LogFile, id: Option<u64>, applied: u64) -> io::Result<Reading> {
    let size = file.size()?;
    let len = usize::try_from(size)
        .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "a log larger than memory"))?;
    let mut bytes = vec![0u8; len];
    file.read_at(0, &mut bytes)?;
    Ok(read_bytes(&bytes, id, applied))
}

/// [`read`] on the log's bytes (none: a missing file).
pub fn read_bytes(bytes: &[u8], id: Option<u64>, applied: u64) -> Reading {
    match id {
        Some(id) => Reading {
            scan: scan::scan(bytes, id, applied),
            current: true,
        },
        // Made, but the redb file was not told before a crash: no record was written to it.
        None if LogHeader::looks_like(bytes) => Reading {
            scan: Scan {
                records: Vec::new(),
                end: End::Clean {
                    offset: offset_of(0),
                    lsn: applied + 1,
                },
                written: applied,
                file: None,
                after: Vec::new(),
                unreadable_pages: Vec::new(),
            },
            current: false,
        },
        None => Reading {
            scan: legacy::scan(bytes, applied),
            current: false,
        },
    }
}

#[derive(Debug)]
pub struct Wal {
    file: Box<dyn LogFile>,
    id: u64,
    /// The file's size, in whole pages.
    size: u64,
    /// Where the next record goes in the stream of records (`format`).
    pos: u64,
    /// The number of the next record.
    next_lsn: u64,
    /// Every record up to this number is durable: synced, or in a durable checkpoint.
    synced: u64,
    /// The page that holds `pos`, as written since the last reset: an append writes it again
    /// in front of its record, with the new header.
    page: Vec<u8>,
    /// Where the first record that starts in that page starts (0: none yet).
    first: u16,
    /// The pages being written, kept to reuse their allocation.
    buffer: Vec<u8>,
}

impl Wal {
    /// Makes a new log in `file`, at least `capacity` bytes (and no smaller than the file),
    /// for a store that has settled every record up to `base`, and syncs it. The redb file
    /// must then record its [`Wal::id`] before any record is written.
    pub fn make(file: Box<dyn LogFile>, capacity: u64, base: u64) -> io::Result<Self> {
        let id = loop {
            let id: u64 = rand::random();
            if id != 0 {
                break id;
            }
        };
        let size = file
            .size()?
            .max(capacity)
            .max(2 * PAGE)
            .next_multiple_of(PAGE);
        let header = LogHeader {
            id,
            made: size,
            base,
        };
        file.write_at(0, &header.encode())?;
        let mut wal = Self::at(file, id, PAGE, base);
        wal.fill_pages(size)?;
        Ok(wal)
    }

    /// Goes on writing the store's log `id` (read by [`read`], intact), whose records up to
    /// `settled` are all in the redb file, durably. Gives the pages in `unreadable` (whose
    /// header does not check) an empty header, and grows the file to `capacity` if it is
    /// smaller.
    ///
    /// Why the empty headers: the next record to reach such a page, cut by a crash, would leave
    /// it unreadable, which reads as damage (a page the log was made with has a header). Such
    /// a page holds nothing needed: the log was read whole. It comes from a growth of the file
    /// cut by a crash (pages not yet written), or from damage to older records.
    pub fn resume(
        file: Box<dyn LogFile>,
        id: u64,
        settled: u64,
        capacity: u64,
        unreadable: &[u64],
    ) -> io::Result<Self> {
        let size = file.size()? / PAGE * PAGE;
        let mut wal = Self::at(file, id, size, settled);
        let mut header = [0u8; format::PAGE_HEADER_LEN];
        let mut rewritten = false;
        for &page in unreadable.iter().filter(|page| **page < size / PAGE) {
            PageHeader::default().encode(id, page, &mut header);
            wal.file.write_at(page * PAGE, &header)?;
            rewritten = true;
        }
        if size < capacity {
            wal.fill_pages(capacity.next_multiple_of(PAGE))?;
        } else if rewritten {
            wal.file.sync()?;
        }
        Ok(wal)
    }

    fn at(file: Box<dyn LogFile>, id: u64, size: u64, settled: u64) -> Self {
        Self {
            file,
            id,
            size,
            pos: 0,
            next_lsn: settled + 1,
            synced: settled,
            page: vec![0u8; PAGE_LEN],
            first: 0,
            buffer: Vec::new(),
        }
    }

    /// This log's identity, which the redb file keeps.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The number the next record gets.
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Whether a record of `payload` bytes fits after the ones since the last reset.
    pub fn fits(&self, payload: usize) -> bool {
        self.pos + format::RECORD_HEADER + payload as u64 <= stream_len(self.size)
    }

    /// Bytes of records written since the last reset.
    pub fn used(&self) -> u64 {
        self.pos
    }

    /// Writes `payload` as the next record (not synced). Call [`Wal::fits`] first: a record
    /// that does not fit grows the file, which only a first record should have to do.
    pub fn append(&mut self, payload: &[u8]) -> io::Result<u64> {
        let lsn = self.next_lsn;
        let header = RecordHeader::for_payload(lsn, payload).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a commit of no bytes, or of 4 GiB or more",
            )
        })?;
        let end = self.pos + header.size();
        if end > stream_len(self.size) {
            self.fill_pages(size_for(end))?;
        }
        let start_page = page_of(self.pos);
        let start = usize::try_from(offset_of(self.pos) - start_page * PAGE)
            .map_err(|_| io::Error::other("a page offset"))?;
        if self.first == 0 {
            // A page offset is below 4096.
            self.first = u16::try_from(start).unwrap_or(0);
        }
        // The pages from the start of the record's first one: what that page holds already,
        // then the record, a page header's room at the start of each next page.
        self.buffer.clear();
        self.buffer.extend_from_slice(&self.page[..start]);
        push_paged(&mut self.buffer, &header.encode(self.id));
        push_paged(&mut self.buffer, payload);
        let pages = self.buffer.len().div_ceil(PAGE_LEN);
        for (n, page) in self.buffer.chunks_mut(PAGE_LEN).enumerate() {
            PageHeader {
                stamp: lsn,
                synced: self.synced,
                first: if n == 0 { self.first } else { 0 },
            }
            .encode(self.id, start_page + n as u64, page);
        }
        self.file.write_at(start_page * PAGE, &self.buffer)?;
        self.pos = end;
        self.next_lsn += 1;
        // The next record starts in the last page written, or at the start of the one after.
        let last = pages - 1;
        if page_of(self.pos) == start_page + last as u64 {
            let tail = &self.buffer[last * PAGE_LEN..];
            self.page[..tail.len()].copy_from_slice(tail);
            if last > 0 {
                self.first = 0;
            }
        } else {
            self.first = 0;
        }
        Ok(lsn)
    }

    /// Makes every record written so far durable.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync()?;
        self.synced = self.next_lsn - 1;
        Ok(())
    }

    /// Starts over at the beginning: every record so far is in a durable redb commit.
    pub fn reset(&mut self) {
        self.pos = 0;
        self.first = 0;
        self.synced = self.next_lsn - 1;
    }

    /// Writes every page from the file's end to `size` with an empty header (page 0 aside),
    /// and syncs, so that later writes in that range overwrite allocated blocks.
    fn fill_pages(&mut self, size: u64) -> io::Result<()> {
        const CHUNK_PAGES: u64 = 256;
        let mut page = self.size / PAGE;
        let last = size / PAGE;
        while page < last {
            let count = (last - page).min(CHUNK_PAGES);
            let mut chunk = vec![0u8; usize::try_from(count * PAGE).unwrap_or(0)];
            for (n, bytes) in chunk.chunks_mut(PAGE_LEN).enumerate() {
                PageHeader::default().encode(self.id, page + n as u64, bytes);
            }
            self.file.write_at(page * PAGE, &chunk)?;
            page += count;
        }
        self.file.sync()?;
        self.size = self.size.max(last * PAGE);
        Ok(())
    }
}

/// Appends `bytes` to `buffer`, which holds pages from the start of one, leaving a page
/// header's room at the start of each new page.
fn push_paged(buffer: &mut Vec<u8>, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        if buffer.len() % PAGE_LEN == 0 {
            buffer.resize(buffer.len() + format::PAGE_HEADER_LEN, 0);
        }
        let room = PAGE_LEN - buffer.len() % PAGE_LEN;
        let (now, rest) = bytes.split_at(room.min(bytes.len()));
        buffer.extend_from_slice(now);
        bytes = rest;
    }
}

/// What a scan found wrong, in words: the file, the byte offset, and the records that follow.
pub fn describe_damage(scan: &Scan, applied: u64) -> Option<String> {
    let readable = scan.records.len() + scan.after.len();
    let follow = |after: &[Found]| match (after.first(), after.last()) {
        (Some(first), _) if after.len() == 1 => {
            format!("1 readable record follows it (record {})", first.lsn)
        }
        (Some(first), Some(last)) => format!(
            "{} readable records follow it (records {} to {})",
            after.len(),
            first.lsn,
            last.lsn
        ),
        _ => "no readable record follows it".to_owned(),
    };
    let what = match &scan.file {
        Some(FileDamage::Missing) => format!(
            "it is missing or empty (from byte 0), but the store file has logged its commits \
             in it (up to record {applied} at its last checkpoint): whatever was logged after \
             that is gone, and how much cannot be known"
        ),
        Some(FileDamage::Header) => format!(
            "its header (the first 4096 bytes, from byte 0) does not check; {readable} records \
             past the store file's last checkpoint can still be read"
        ),
        Some(FileDamage::OtherLog { found }) => format!(
            "it is another store's log (its header at byte 0 names log {found:016x}, not the \
             one the store file names)"
        ),
        Some(FileDamage::Cut { size, made }) => format!(
            "it was cut at byte {size}: it was made {made} bytes long; {readable} records past \
             the store file's last checkpoint can still be read before the cut"
        ),
        Some(FileDamage::Behind { written }) => format!(
            "its pages at byte 4096 and on never held a record past {written}, but the store \
             file has applied records up to {applied} from its log: it is an older copy, or \
             another log"
        ),
        None => match &scan.end {
            End::Damaged { offset, lsn, why } => format!(
                "record {lsn} at byte {offset} {why}; {}, so this is not the torn tail a \
                 crash leaves",
                follow(&scan.after)
            ),
            End::Clean { .. } | End::Torn { .. } => return None,
        },
    };
    Some(what)
}

#[cfg(test)]
mod tests;
