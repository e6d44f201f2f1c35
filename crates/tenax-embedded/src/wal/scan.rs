//! Reading a log (format 2) at open: the records to apply again, and what ends them: the end of
//! what was written, a crash's torn tail, or damage. It works on the file's bytes and decides
//! nothing else, so that every case is a unit test; the rules are `wal`'s invariants.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

use super::format::{
    LogHeader, PAGE, PAGE_DATA, PAGE_LEN, PageHeader, RECORD_HEADER, RECORD_HEADER_LEN,
    RecordHeader, offset_of, page_of, position, stream_len,
};

/// A record read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub lsn: u64,
    /// Where it starts in the file, and where it ends (exclusive).
    pub offset: u64,
    pub end: u64,
    pub payload: Vec<u8>,
}

/// How the records past the store file's last checkpoint end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Nothing numbered `lsn` or later was ever written: the log ends there.
    Clean { offset: u64, lsn: u64 },
    /// Record `lsn` was being written when the power went, and part of it never reached the
    /// disk. No record was synced after it, so nothing from it on was acknowledged as durable
    /// (in relaxed mode, what the mode risks).
    Torn { offset: u64, lsn: u64 },
    /// Record `lsn` cannot be read, and no crash leaves it so.
    Damaged { offset: u64, lsn: u64, why: Why },
}

/// Why an unreadable record is damage, not a torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// A page written later says that the record had been made durable before.
    SyncedBefore { page_offset: u64 },
    /// A record written later can be read (a log of format 1, whose writer synced each record
    /// before writing the next).
    Later { lsn: u64, offset: u64 },
    /// The header of a page it lies in does not check.
    PageHeader { page_offset: u64 },
    /// The page it starts in was written with it, but its header does not check.
    Header,
    /// The page it starts in was written with it, but another record is in its place.
    Number { found: u64 },
    /// Its header says it goes on past the end of the file.
    PastEnd,
    /// Every page of it was written, but its payload does not check.
    Payload,
}

/// What is wrong with the log file as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileDamage {
    /// The file is missing or empty, and the store file has used a log.
    Missing,
    /// Its first page, the log header, does not check.
    Header,
    /// It is the log of another store.
    OtherLog { found: u64 },
    /// It is shorter than it was made.
    Cut { size: u64, made: u64 },
    /// The store file has applied records that this log never held.
    Behind { written: u64 },
}

/// What a log holds past the store file's last checkpoint.
#[derive(Debug, Clone)]
pub struct Scan {
    /// The records past the last one applied (`applied`), in order: the ones to apply again.
    pub records: Vec<Found>,
    pub end: End,
    /// The highest record number the log shows was written (its pages' stamps, its records,
    /// the number it was made after). A new record must get a higher one.
    pub written: u64,
    pub file: Option<FileDamage>,
    /// Records that can be read after the end (only looked for when the end is not clean, or
    /// the file is damaged): they follow a record that is lost.
    pub after: Vec<Found>,
    /// The pages after page 0 whose header does not check: any of them may have held records
    /// numbered past `written`.
    pub unreadable_pages: Vec<u64>,
}

impl Scan {
    /// Whether the store may open on this log: the file is whole and its records end cleanly
    /// or with a torn tail.
    #[cfg(test)]
    pub fn is_intact(&self) -> bool {
        self.file.is_none() && !matches!(self.end, End::Damaged { .. })
    }
}

/// The log's bytes, read through the log `id`'s checksums.
struct Image<'a> {
    bytes: &'a [u8],
    id: u64,
    /// Each page's header from page 1 on (index 0 is page 1): `None` where it does not check.
    pages: Vec<Option<PageHeader>>,
}

impl<'a> Image<'a> {
    fn new(bytes: &'a [u8], id: u64) -> Self {
        let pages = bytes
            .chunks(PAGE_LEN)
            .enumerate()
            .skip(1)
            .map(|(n, page)| PageHeader::decode(id, n as u64, page))
            .collect();
        Self { bytes, id, pages }
    }

    fn stream_len(&self) -> u64 {
        stream_len(self.bytes.len() as u64)
    }

    /// The header of page `page` (from 1): `Err(())` where it does not check or is past the
    /// end of the file.
    fn page(&self, page: u64) -> Result<PageHeader, ()> {
        let index = usize::try_from(page.checked_sub(1).ok_or(())?).map_err(drop)?;
        self.pages.get(index).copied().flatten().ok_or(())
    }

    /// Fills `out` with the stream's bytes from `pos`, if the file holds them.
    fn read_into(&self, pos: u64, out: &mut [u8]) -> Option<()> {
        let len = out.len() as u64;
        if pos.checked_add(len)? > self.stream_len() {
            return None;
        }
        let mut done = 0usize;
        while done < out.len() {
            let at = pos + done as u64;
            let take = usize::try_from((PAGE_DATA - at % PAGE_DATA).min(len - done as u64)).ok()?;
            let start = usize::try_from(offset_of(at)).ok()?;
            out[done..done + take].copy_from_slice(self.bytes.get(start..start + take)?);
            done += take;
        }
        Some(())
    }

    fn header_at(&self, pos: u64) -> Option<RecordHeader> {
        self.header_numbered(pos, 0..=u64::MAX)
    }

    /// The record header at `pos`, if it checks and its number is in `numbers` (looked at
    /// first: a search tries every position of a page).
    fn header_numbered(
        &self,
        pos: u64,
        numbers: std::ops::RangeInclusive<u64>,
    ) -> Option<RecordHeader> {
        let mut bytes = [0u8; RECORD_HEADER_LEN];
        self.read_into(pos, &mut bytes)?;
        let number = u64::from_le_bytes(bytes[4..12].try_into().ok()?);
        if !numbers.contains(&number) {
            return None;
        }
        RecordHeader::decode(self.id, &bytes)
    }

    /// The whole record at `pos`, if it checks.
    fn record_at(&self, pos: u64) -> Option<Found> {
        self.record_numbered(pos, 0..=u64::MAX)
    }

    /// The whole record at `pos`, if it checks and its number is in `numbers`.
    fn record_numbered(&self, pos: u64, numbers: std::ops::RangeInclusive<u64>) -> Option<Found> {
        let header = self.header_numbered(pos, numbers)?;
        if pos + header.size() > self.stream_len() {
            return None;
        }
        let mut payload = vec![0u8; usize::try_from(header.length).ok()?];
        self.read_into(pos + RECORD_HEADER, &mut payload)?;
        (crc32fast::hash(&payload) == header.payload_crc).then(|| Found {
            lsn: header.lsn,
            offset: offset_of(pos),
            end: offset_of(pos + header.size() - 1) + 1,
            payload,
        })
    }
}

/// Reads the log in `bytes`, expected to be log `id`, for a store file that has applied every
/// record up to `applied`.
pub fn scan(bytes: &[u8], id: u64, applied: u64) -> Scan {
    let header = bytes.get(..PAGE_LEN).and_then(LogHeader::decode);
    let file = if bytes.is_empty() {
        Some(FileDamage::Missing)
    } else {
        match header {
            None => Some(FileDamage::Header),
            Some(header) if header.id != id => Some(FileDamage::OtherLog { found: header.id }),
            Some(header) if (bytes.len() as u64) < header.made => Some(FileDamage::Cut {
                size: bytes.len() as u64,
                made: header.made,
            }),
            Some(_) => None,
        }
    };
    let image = Image::new(bytes, id);
    let mut written = image
        .pages
        .iter()
        .flatten()
        .map(|page| page.stamp)
        .max()
        .unwrap_or(0);
    if let Some(header) = header.filter(|h| h.id == id) {
        written = written.max(header.base);
    }
    // The records since the last checkpoint start the stream, each numbered one more than the
    // one before; those past `applied` are the ones to apply. (The first is `applied + 1`, or
    // earlier if the redb file kept a commit made after its last checkpoint, or older than
    // `applied` if nothing was written since: then it is the last checkpoint's own records.)
    let mut records = Vec::new();
    let mut pos = 0;
    let mut previous: Option<u64> = None;
    while let Some(record) = image.record_at(pos).filter(|r| match previous {
        Some(p) => r.lsn == p + 1,
        None => r.lsn <= applied + 1,
    }) {
        pos += offset_span(&record);
        previous = Some(record.lsn);
        if record.lsn > applied {
            records.push(record);
        }
    }
    let next = previous.map_or(applied + 1, |p| p + 1);
    let end = if bytes.is_empty() {
        End::Clean {
            offset: 0,
            lsn: next,
        }
    } else {
        // A file cut short may have held the next record past its end; one whose header does
        // not check may have been.
        let made = match header {
            Some(header) if header.id == id => header.made,
            Some(_) => 0,
            None => u64::MAX,
        };
        classify(&image, pos, next, written, stream_len(made))
    };
    written = written.max(previous.unwrap_or(0));
    let file = file.or_else(|| (written < applied).then_some(FileDamage::Behind { written }));
    let after = if file.is_some() || !matches!(end, End::Clean { .. }) {
        later_records(&image, pos, next)
    } else {
        Vec::new()
    };
    Scan {
        records,
        end,
        written,
        file,
        after,
        unreadable_pages: (1..=image.pages.len() as u64)
            .filter(|page| image.page(*page).is_err())
            .collect(),
    }
}

/// The bytes of stream a record takes.
fn offset_span(record: &Found) -> u64 {
    RECORD_HEADER + record.payload.len() as u64
}

/// What ends the records at `pos`, where record `lsn` is not.
///
/// A crash can only leave a record torn if it was not durable yet, and a torn write leaves a
/// page as it was before (the disk writes a page whole or not at all): a page of the record
/// whose stamp is older than the record. So the record is damaged if a page written later says
/// it was durable, or if every page of it was written and it still does not check.
fn classify(image: &Image<'_>, pos: u64, lsn: u64, written: u64, made: u64) -> End {
    let offset = offset_of(pos);
    let damaged = |why| End::Damaged { offset, lsn, why };
    // Where no record header fits, the writer never put one: a record that does not fit in
    // what is left goes at the start after a checkpoint. (Unless the file was longer.)
    if pos + RECORD_HEADER > image.stream_len() {
        return if pos + RECORD_HEADER <= made {
            damaged(Why::PastEnd)
        } else {
            End::Clean { offset, lsn }
        };
    }
    let not_whole = || {
        let proof = image.pages.iter().enumerate().find_map(|(index, page)| {
            page.filter(|p| p.synced >= lsn)
                .map(|_| (index as u64 + 1) * PAGE)
        });
        match proof {
            Some(page_offset) => damaged(Why::SyncedBefore { page_offset }),
            None if written >= lsn => End::Torn { offset, lsn },
            None => End::Clean { offset, lsn },
        }
    };
    // The pages its header would lie in: if one was not written with it, it is not there.
    for page in page_of(pos)..=page_of(pos + RECORD_HEADER - 1) {
        match image.page(page) {
            Err(()) => {
                return damaged(Why::PageHeader {
                    page_offset: page * PAGE,
                });
            }
            Ok(header) if header.stamp < lsn => return not_whole(),
            Ok(_) => {}
        }
    }
    let Some(header) = image.header_at(pos) else {
        return damaged(Why::Header);
    };
    if header.lsn != lsn {
        return damaged(Why::Number { found: header.lsn });
    }
    let end = pos + header.size();
    if end > image.stream_len() {
        return damaged(Why::PastEnd);
    }
    for page in page_of(pos)..=page_of(end - 1) {
        match image.page(page) {
            Err(()) => {
                return damaged(Why::PageHeader {
                    page_offset: page * PAGE,
                });
            }
            Ok(header) if header.stamp < lsn => return not_whole(),
            Ok(_) => {}
        }
    }
    damaged(Why::Payload)
}

/// The records numbered `lsn` or later that can be read after position `pos`, in order: where
/// the record at `pos` says the next one starts, anywhere in the rest of its page, and where
/// each later page written since says its first record starts; and on from each, looking
/// through the rest of a page again wherever a run of records stops in it.
fn later_records(image: &Image<'_>, pos: u64, lsn: u64) -> Vec<Found> {
    let stream = image.stream_len();
    if pos >= stream {
        return Vec::new();
    }
    // A record's number is at most one per record header's worth of stream past `lsn`.
    let highest = lsn + stream / RECORD_HEADER;
    // Where to try, and whether a record is known to start there (else it is a guess).
    let mut starts: Vec<(u64, bool)> = Vec::new();
    let mut searched: BTreeSet<u64> = BTreeSet::new();
    let search_rest_of_page =
        |from: u64, starts: &mut Vec<(u64, bool)>, searched: &mut BTreeSet<u64>| {
            let page = page_of(from);
            if searched.insert(page) {
                let page_end = (page * PAGE_DATA).min(stream);
                starts.extend((from + 1..page_end).rev().map(|at| (at, false)));
            }
        };
    for page in (page_of(pos) + 1..=stream / PAGE_DATA).rev() {
        if let Ok(header) = image.page(page) {
            if header.stamp >= lsn && header.first != 0 {
                starts.push((position(page, u64::from(header.first)), true));
            }
        }
    }
    search_rest_of_page(pos, &mut starts, &mut searched);
    if let Some(header) = image.header_at(pos).filter(|h| h.lsn == lsn) {
        starts.push((pos + header.size(), true));
    }
    let mut found: BTreeMap<u64, Found> = BTreeMap::new();
    let mut visited: HashSet<u64> = HashSet::new();
    while let Some((start, known)) = starts.pop() {
        let mut at = start;
        let mut any = false;
        while at < stream && visited.insert(at) {
            let Some(record) = image.record_numbered(at, lsn..=highest) else {
                break;
            };
            at += offset_span(&record);
            any = true;
            found.insert(record.lsn, record);
        }
        if (known || any) && at < stream {
            search_rest_of_page(at, &mut starts, &mut searched);
        }
    }
    found.into_values().collect()
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::SyncedBefore { page_offset } => write!(
                f,
                "does not read back, yet the page at byte {page_offset} was written after it \
                 had been synced"
            ),
            Why::Later { lsn, offset } => write!(
                f,
                "does not read back, yet record {lsn}, written after it, can be read at byte \
                 {offset}"
            ),
            Why::PageHeader { page_offset } => write!(
                f,
                "lies in the page at byte {page_offset}, whose header does not check"
            ),
            Why::Header => write!(
                f,
                "has a header that does not check, though its page was written with it"
            ),
            Why::Number { found } => write!(
                f,
                "is not there, though its page was written with it: record {found} is in its \
                 place"
            ),
            Why::PastEnd => write!(f, "runs past the end of the file"),
            Why::Payload => write!(f, "does not check, though every page of it was written"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::format::PAGE_HEADER;
    use super::*;

    #[test]
    fn an_empty_file_is_missing_and_ends_at_once() {
        let scan = scan(&[], 1, 5);
        assert_eq!(scan.file, Some(FileDamage::Missing));
        assert_eq!(scan.end, End::Clean { offset: 0, lsn: 6 });
        assert_eq!(scan.written, 0, "it shows nothing");
        assert!(scan.records.is_empty());
    }

    #[test]
    fn a_page_of_zeros_does_not_check() {
        let mut bytes = LogHeader {
            id: 3,
            made: 2 * PAGE,
            base: 0,
        }
        .encode();
        bytes.resize(2 * PAGE_LEN, 0);
        let scan = scan(&bytes, 3, 0);
        assert_eq!(scan.file, None);
        assert_eq!(
            scan.end,
            End::Damaged {
                offset: PAGE + PAGE_HEADER,
                lsn: 1,
                why: Why::PageHeader { page_offset: PAGE }
            }
        );
    }
}
