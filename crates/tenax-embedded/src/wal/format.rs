//! The bytes of the write-ahead log (format 2): its header (page 0), the header of each page
//! after it, the header of each record, and where a record's bytes go in the file. What they
//! mean, and why, is in `wal`'s module doc; this module only encodes and decodes them.
//!
//! Records are laid in a stream of bytes (a *position* counts its bytes from the start of
//! page 1) that fills the pages' data areas, one page after the other: a record may start
//! anywhere in a page and go on into the next pages.

/// The unit a disk writes whole or not at all (the simulated disk tears writes at it), and the
/// log's page.
pub const PAGE_LEN: usize = 4096;
pub const PAGE: u64 = PAGE_LEN as u64;
/// [`PAGE`] as the header writes it.
const PAGE_U32: u32 = 4096;

/// Bytes before a page's data.
pub const PAGE_HEADER_LEN: usize = 24;
pub const PAGE_HEADER: u64 = PAGE_HEADER_LEN as u64;

/// Bytes of records one page holds.
pub const PAGE_DATA: u64 = PAGE - PAGE_HEADER;

/// Bytes before a record's payload.
pub const RECORD_HEADER_LEN: usize = 20;
pub const RECORD_HEADER: u64 = RECORD_HEADER_LEN as u64;

const MAGIC: [u8; 8] = *b"TENAXWAL";
pub const VERSION: u32 = 2;
/// Where page 0 keeps the CRC of the rest of it.
const HEADER_CRC_AT: usize = PAGE_LEN - 4;

/// A little-endian integer of `bytes` at `at`; zero where `bytes` is too short (callers check
/// lengths first: a short slice is a bug, not a panic).
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    bytes
        .get(at..at + 2)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u16::from_le_bytes)
}

/// The log header, page 0: written once, when the log is made, and never again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogHeader {
    /// This log's identity; the redb file keeps it (`wal_id` in `meta`), and every record's
    /// and page's checksum covers it, so a record of another log never reads as one of this.
    pub id: u64,
    /// The file's size when made: a shorter file has been cut.
    pub made: u64,
    /// The number of the last record the store had settled when the log was made: the first
    /// record of this log is `base + 1`.
    pub base: u64,
}

impl LogHeader {
    /// Page 0 of a log with this header.
    pub fn encode(&self) -> Vec<u8> {
        let mut page = vec![0u8; PAGE_LEN];
        page[0..8].copy_from_slice(&MAGIC);
        page[8..12].copy_from_slice(&VERSION.to_le_bytes());
        page[12..16].copy_from_slice(&PAGE_U32.to_le_bytes());
        page[16..24].copy_from_slice(&self.id.to_le_bytes());
        page[24..32].copy_from_slice(&self.made.to_le_bytes());
        page[32..40].copy_from_slice(&self.base.to_le_bytes());
        let crc = crc32fast::hash(&page[..HEADER_CRC_AT]);
        page[HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        page
    }

    /// The header in `page` (the file's first [`PAGE`] bytes), if the whole page checks.
    pub fn decode(page: &[u8]) -> Option<Self> {
        if page.len() < PAGE_LEN
            || page[0..8] != MAGIC
            || u32_at(page, 8) != VERSION
            || u32_at(page, 12) != PAGE_U32
            || crc32fast::hash(&page[..HEADER_CRC_AT]) != u32_at(page, HEADER_CRC_AT)
        {
            return None;
        }
        Some(Self {
            id: u64_at(page, 16),
            made: u64_at(page, 24),
            base: u64_at(page, 32),
        })
    }

    /// Whether `page` starts as a format 2 log does, checking or not.
    pub fn looks_like(page: &[u8]) -> bool {
        page.get(0..8) == Some(&MAGIC[..])
    }
}

/// The header of a page after page 0, rewritten with the page by every record written into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageHeader {
    /// The number of the last record written into the page; 0 when none has been since the
    /// log was made.
    pub stamp: u64,
    /// Every record up to this number was durable (synced in the log, or checkpointed) when
    /// the page was last written.
    pub synced: u64,
    /// Where in the page the first record that starts in it since the last checkpoint starts
    /// (an offset from the page's start); 0 if none does (a record going on from the page
    /// before fills it).
    pub first: u16,
}

impl PageHeader {
    /// Writes the header of page `page` of log `id` into `out` (its first [`PAGE_HEADER`]
    /// bytes).
    pub fn encode(&self, id: u64, page: u64, out: &mut [u8]) {
        let out = &mut out[..PAGE_HEADER_LEN];
        out[0..8].copy_from_slice(&self.stamp.to_le_bytes());
        out[8..16].copy_from_slice(&self.synced.to_le_bytes());
        out[16..18].copy_from_slice(&self.first.to_le_bytes());
        out[18..20].fill(0);
        let crc = page_crc(id, page, &out[..20]);
        out[20..24].copy_from_slice(&crc.to_le_bytes());
    }

    /// The header of page `page` of log `id` in `bytes` (the page's first bytes), if it checks.
    /// A page of zeros does not: every page is written with a header when the log is made.
    pub fn decode(id: u64, page: u64, bytes: &[u8]) -> Option<Self> {
        if bytes.len() < PAGE_HEADER_LEN || page_crc(id, page, &bytes[..20]) != u32_at(bytes, 20) {
            return None;
        }
        let first = u16_at(bytes, 16);
        let first_fits = first == 0 || (PAGE_HEADER..PAGE).contains(&u64::from(first));
        (first_fits && bytes[18..20] == [0, 0]).then(|| Self {
            stamp: u64_at(bytes, 0),
            synced: u64_at(bytes, 8),
            first,
        })
    }
}

fn page_crc(id: u64, page: u64, fields: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&id.to_le_bytes());
    hasher.update(&page.to_le_bytes());
    hasher.update(fields);
    hasher.finalize()
}

/// The header of a record: its own checksum, so that its length can be trusted when the
/// payload does not check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// The payload's length (never 0).
    pub length: u32,
    /// The record's number: one more than the record before it.
    pub lsn: u64,
    pub payload_crc: u32,
}

impl RecordHeader {
    pub fn for_payload(lsn: u64, payload: &[u8]) -> Option<Self> {
        Some(Self {
            length: u32::try_from(payload.len()).ok().filter(|n| *n > 0)?,
            lsn,
            payload_crc: crc32fast::hash(payload),
        })
    }

    pub fn encode(&self, id: u64) -> [u8; RECORD_HEADER_LEN] {
        let mut out = [0u8; RECORD_HEADER_LEN];
        out[0..4].copy_from_slice(&self.length.to_le_bytes());
        out[4..12].copy_from_slice(&self.lsn.to_le_bytes());
        out[12..16].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = record_crc(id, &out[..16]);
        out[16..20].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// The record header of log `id` in `bytes`, if it checks.
    pub fn decode(id: u64, bytes: &[u8]) -> Option<Self> {
        if bytes.len() < RECORD_HEADER_LEN || record_crc(id, &bytes[..16]) != u32_at(bytes, 16) {
            return None;
        }
        let length = u32_at(bytes, 0);
        (length > 0).then(|| Self {
            length,
            lsn: u64_at(bytes, 4),
            payload_crc: u32_at(bytes, 12),
        })
    }

    /// The record's bytes in the stream, header included.
    pub fn size(&self) -> u64 {
        RECORD_HEADER + u64::from(self.length)
    }
}

fn record_crc(id: u64, fields: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&id.to_le_bytes());
    hasher.update(fields);
    hasher.finalize()
}

/// The page that holds position `pos` of the stream.
pub fn page_of(pos: u64) -> u64 {
    1 + pos / PAGE_DATA
}

/// The file offset of position `pos` of the stream.
pub fn offset_of(pos: u64) -> u64 {
    page_of(pos) * PAGE + PAGE_HEADER + pos % PAGE_DATA
}

/// The stream position at `offset` in page `page` (`offset` within its data area).
pub fn position(page: u64, offset_in_page: u64) -> u64 {
    (page - 1) * PAGE_DATA + (offset_in_page - PAGE_HEADER)
}

/// How many bytes of stream a file of `size` bytes holds: its pages after page 0, the last one
/// perhaps cut short.
pub fn stream_len(size: u64) -> u64 {
    let (pages, rest) = (size / PAGE, size % PAGE);
    if pages == 0 {
        return 0;
    }
    (pages - 1) * PAGE_DATA + rest.saturating_sub(PAGE_HEADER)
}

/// The size of a file whose stream holds at least `len` bytes.
pub fn size_for(len: u64) -> u64 {
    (1 + len.div_ceil(PAGE_DATA).max(1)) * PAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_back_and_a_changed_bit_does_not() {
        let header = LogHeader {
            id: 7,
            made: 16 * PAGE,
            base: 41,
        };
        let mut page = header.encode();
        assert_eq!(LogHeader::decode(&page), Some(header));
        page[2000] ^= 1;
        assert_eq!(LogHeader::decode(&page), None, "the whole page is checked");

        let mut bytes = [0u8; PAGE_LEN];
        let page_header = PageHeader {
            stamp: 9,
            synced: 8,
            first: 100,
        };
        page_header.encode(7, 3, &mut bytes);
        assert_eq!(PageHeader::decode(7, 3, &bytes), Some(page_header));
        assert_eq!(PageHeader::decode(7, 4, &bytes), None, "another page's");
        assert_eq!(PageHeader::decode(8, 3, &bytes), None, "another log's");
        assert_eq!(PageHeader::decode(7, 3, &[0u8; 24]), None, "zeros");

        let record = RecordHeader::for_payload(12, b"ops").unwrap();
        let mut bytes = record.encode(7);
        assert_eq!(RecordHeader::decode(7, &bytes), Some(record));
        assert_eq!(RecordHeader::decode(8, &bytes), None, "another log's");
        bytes[0] ^= 4;
        assert_eq!(RecordHeader::decode(7, &bytes), None);
        assert_eq!(RecordHeader::for_payload(1, b""), None, "never empty");
    }

    #[test]
    fn positions_fill_each_page_after_its_header() {
        assert_eq!(offset_of(0), PAGE + PAGE_HEADER);
        assert_eq!(offset_of(PAGE_DATA - 1), 2 * PAGE - 1);
        assert_eq!(offset_of(PAGE_DATA), 2 * PAGE + PAGE_HEADER);
        assert_eq!(position(2, PAGE_HEADER), PAGE_DATA);
        assert_eq!(stream_len(3 * PAGE), 2 * PAGE_DATA);
        assert_eq!(stream_len(3 * PAGE + 100), 2 * PAGE_DATA + 76);
        assert_eq!(stream_len(100), 0);
        assert_eq!(size_for(1), 2 * PAGE);
        assert_eq!(size_for(PAGE_DATA + 1), 3 * PAGE);
    }
}
