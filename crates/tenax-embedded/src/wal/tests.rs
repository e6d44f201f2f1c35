//! The log on a simulated disk: what a crash leaves reads as the end or a torn tail, and every
//! other change to the bytes as damage, never as a shorter log.

use super::format::{PAGE, PAGE_HEADER, RECORD_HEADER};
use super::scan::{End, FileDamage, Why};
use super::*;
use crate::disk::SimulatedDisk;

const SMALL: u64 = 8 * PAGE;
const NAME: &str = "tenax.wal";

fn new_log(disk: &SimulatedDisk, base: u64) -> Wal {
    Wal::make(Box::new(disk.file(NAME)), SMALL, base).unwrap()
}

fn image(disk: &SimulatedDisk) -> Vec<u8> {
    let file = disk.file(NAME);
    let mut bytes = vec![0u8; usize::try_from(file.size().unwrap()).unwrap()];
    file.read_at(0, &mut bytes).unwrap();
    bytes
}

fn numbers(scan: &Scan) -> Vec<u64> {
    scan.records.iter().map(|r| r.lsn).collect()
}

/// A payload of `len` bytes that says which record it is.
fn payload(lsn: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (lsn * 31 + i as u64).to_le_bytes()[0])
        .collect()
}

/// Records `1..=count` of the given sizes, each synced, as the writer in sync mode leaves them.
fn synced_log(disk: &SimulatedDisk, sizes: &[usize]) -> Wal {
    let mut wal = new_log(disk, 0);
    for (n, size) in sizes.iter().enumerate() {
        wal.append(&payload(n as u64 + 1, *size)).unwrap();
        wal.sync().unwrap();
    }
    wal
}

#[test]
fn records_after_the_applied_one_come_back_in_order() {
    let disk = SimulatedDisk::new();
    let wal = synced_log(&disk, &[3, 3, 5]);
    let scan = scan::scan(&image(&disk.reboot(|_, _| false)), wal.id(), 1);
    assert_eq!(numbers(&scan), [2, 3]);
    assert_eq!(scan.records[1].payload, payload(3, 5));
    assert!(scan.is_intact());
    assert_eq!(scan.written, 3);
}

#[test]
fn a_record_cut_by_the_power_is_a_torn_tail_whichever_pages_reached_the_disk() {
    // Records of every size around a page, so that the last one spans one to three pages.
    for size in [10, 4000, 4100, 9000] {
        let disk = SimulatedDisk::new();
        let mut wal = synced_log(&disk, &[700, 1200, 300]);
        wal.append(&payload(4, size)).unwrap();
        // Every subset of the pages written since the sync (at most 4, one after the other)
        // may have reached the disk.
        for mask in 0u32..1 << 4 {
            let after = disk.reboot(|_, page| mask & (1 << (page % 4)) != 0);
            let scan = scan::scan(&image(&after), wal.id(), 0);
            assert!(scan.is_intact(), "size {size}, mask {mask:04b}: {scan:?}");
            let read = numbers(&scan);
            assert!(
                read == [1, 2, 3] || read == [1, 2, 3, 4],
                "size {size}, mask {mask:04b}: {read:?}"
            );
            if read.len() == 3 {
                assert!(
                    matches!(
                        scan.end,
                        End::Torn { lsn: 4, .. } | End::Clean { lsn: 4, .. }
                    ),
                    "{:?}",
                    scan.end
                );
            }
        }
    }
}

#[test]
fn after_a_reset_older_records_are_not_read_again() {
    let disk = SimulatedDisk::new();
    let mut wal = synced_log(&disk, &[100, 100]);
    // Checkpointed through record 2: start over, with a shorter record.
    wal.reset();
    wal.append(b"three").unwrap();
    wal.sync().unwrap();
    let scan = scan::scan(&image(&disk.reboot(|_, _| false)), wal.id(), 2);
    assert_eq!(numbers(&scan), [3]);
    assert!(scan.is_intact());
    assert_eq!(
        scan.end,
        End::Clean {
            offset: offset_of(RECORD_HEADER + 5),
            lsn: 4
        }
    );
    // Nothing after the checkpoint: nothing to apply, and numbers go on past what was written.
    let scan = scan::scan(&image(&disk.reboot(|_, _| false)), wal.id(), 3);
    assert!(scan.records.is_empty() && scan.is_intact());
    assert_eq!(scan.written, 3);
}

#[test]
fn a_record_larger_than_the_file_grows_it() {
    let disk = SimulatedDisk::new();
    let mut wal = new_log(&disk, 0);
    let big = payload(1, usize::try_from(SMALL).unwrap() + 10);
    assert!(!wal.fits(big.len()));
    wal.append(&big).unwrap();
    wal.sync().unwrap();
    let scan = scan::scan(&image(&disk.reboot(|_, _| false)), wal.id(), 0);
    assert_eq!(numbers(&scan), [1]);
    assert_eq!(scan.records[0].payload, big);
    assert!(scan.is_intact());
}

#[test]
fn a_damaged_record_with_readable_ones_after_it_is_refused_with_their_count() {
    let disk = SimulatedDisk::new();
    let wal = synced_log(&disk, &[50, 50, 50, 50, 50]);
    let mut bytes = image(&disk.reboot(|_, _| false));
    // Record 2's payload: it starts after record 1 (70 bytes) and its own header.
    let at = usize::try_from(offset_of(70 + RECORD_HEADER + 10)).unwrap();
    bytes[at] ^= 0x10;
    let scan = scan::scan(&bytes, wal.id(), 0);
    assert_eq!(numbers(&scan), [1]);
    assert!(
        matches!(scan.end, End::Damaged { lsn: 2, .. }),
        "{:?}",
        scan.end
    );
    assert_eq!(
        scan.after.iter().map(|r| r.lsn).collect::<Vec<_>>(),
        [3, 4, 5]
    );
    let message = describe_damage(&scan, 0).unwrap();
    assert!(
        message.contains(&format!("record 2 at byte {}", offset_of(70)))
            && message.contains("3 readable records follow it (records 3 to 5)"),
        "{message}"
    );
}

#[test]
fn a_changed_bit_in_the_last_record_is_damage_not_a_torn_tail() {
    let disk = SimulatedDisk::new();
    let wal = synced_log(&disk, &[50, 5000]);
    let mut bytes = image(&disk.reboot(|_, _| false));
    let at = usize::try_from(offset_of(70 + RECORD_HEADER + 4500)).unwrap();
    bytes[at] ^= 1;
    let scan = scan::scan(&bytes, wal.id(), 0);
    assert_eq!(
        scan.end,
        End::Damaged {
            offset: offset_of(70),
            lsn: 2,
            why: Why::Payload
        }
    );
    assert!(scan.after.is_empty());
}

#[test]
fn in_relaxed_mode_records_after_a_torn_one_are_dropped_with_it() {
    let disk = SimulatedDisk::new();
    let mut wal = synced_log(&disk, &[100]);
    // Three records written, none synced: the first one's second page never reaches the disk.
    wal.append(&payload(2, 4000)).unwrap();
    wal.append(&payload(3, 100)).unwrap();
    wal.append(&payload(4, 100)).unwrap();
    // Record 2 starts in page 1 and ends in page 2, where records 3 and 4 are; page 1 is lost.
    let after = disk.reboot(|_, page| page != 1);
    let scan = scan::scan(&image(&after), wal.id(), 0);
    assert!(scan.is_intact(), "{scan:?}");
    assert_eq!(numbers(&scan), [1]);
    assert!(matches!(scan.end, End::Torn { lsn: 2, .. }));
    assert_eq!(scan.after.iter().map(|r| r.lsn).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(scan.written, 4, "numbers go on past the dropped records");
}

#[test]
fn a_missing_scribbled_foreign_cut_or_stale_file_is_damage() {
    let disk = SimulatedDisk::new();
    let wal = synced_log(&disk, &[100, 100]);
    let bytes = image(&disk.reboot(|_, _| false));
    assert_eq!(scan::scan(&[], wal.id(), 2).file, Some(FileDamage::Missing));

    let mut scribbled = bytes.clone();
    scribbled[..4096].fill(0xAB);
    let scan = scan::scan(&scribbled, wal.id(), 0);
    assert_eq!(scan.file, Some(FileDamage::Header));
    assert_eq!(numbers(&scan), [1, 2], "the records can still be read");

    let other = scan::scan(&bytes, wal.id() ^ 1, 0);
    assert_eq!(other.file, Some(FileDamage::OtherLog { found: wal.id() }));

    let cut = scan::scan(&bytes[..bytes.len() - 4096], wal.id(), 0);
    assert_eq!(
        cut.file,
        Some(FileDamage::Cut {
            size: SMALL - 4096,
            made: SMALL
        })
    );

    // The store file has applied record 9: this log never got that far.
    let stale = scan::scan(&bytes, wal.id(), 9);
    assert_eq!(stale.file, Some(FileDamage::Behind { written: 2 }));
}

/// The pure part of the matrix: one bit changed anywhere in the pages written, or the file cut
/// anywhere, or a page of zeros anywhere: the log reads every record it held, or is damaged.
#[test]
fn any_changed_bit_cut_or_zeroed_page_reads_whole_or_is_damage() {
    let disk = SimulatedDisk::new();
    let mut wal = synced_log(&disk, &[300, 3000, 20, 6000, 40]);
    // Checkpointed through 2, then two more: older records lie past the new ones.
    wal.reset();
    for lsn in 6..=7 {
        wal.append(&payload(lsn, 500)).unwrap();
        wal.sync().unwrap();
    }
    let bytes = image(&disk.reboot(|_, _| false));
    let id = wal.id();
    let whole = scan::scan(&bytes, id, 5);
    assert_eq!(numbers(&whole), [6, 7]);
    // Every byte of the header's fields, of each page header, and of the records to apply;
    // every 61st elsewhere (older records, and what was never written).
    let chain = usize::try_from(offset_of(0)).unwrap()..usize::try_from(offset_of(1040)).unwrap();
    let flips = (0..bytes.len())
        .filter(|at| *at < 64 || at % 4096 < 24 || chain.contains(at) || at % 61 == 0);
    let check = |changed: &[u8], what: &str| {
        let scan = scan::scan(changed, id, 5);
        if scan.is_intact() {
            assert_eq!(numbers(&scan), [6, 7], "{what}: read as a shorter log");
        } else {
            assert!(describe_damage(&scan, 5).is_some(), "{what}");
        }
    };
    for at in flips {
        let mut changed = bytes.clone();
        changed[at] ^= 1 << (at % 8);
        check(&changed, &format!("byte {at}"));
    }
    for len in (0..bytes.len()).step_by(97) {
        check(&bytes[..len], &format!("cut to {len}"));
    }
    for page in 0..bytes.len() / 4096 {
        let mut changed = bytes.clone();
        changed[page * 4096..(page + 1) * 4096].fill(0);
        check(&changed, &format!("page {page} zeroed"));
    }
    // The header page a record's start lies in, changed: damage, never the end.
    let mut changed = bytes.clone();
    changed[4096 + 3] ^= 1;
    let scan = scan::scan(&changed, id, 5);
    assert!(
        matches!(
            scan.end,
            End::Damaged {
                why: Why::PageHeader { page_offset: 4096 },
                ..
            }
        ),
        "{:?}",
        scan.end
    );
    assert_eq!(PAGE_HEADER, 24);
}

#[test]
fn a_page_left_without_a_header_gets_one_before_a_record_reaches_it() {
    let disk = SimulatedDisk::new();
    let wal = synced_log(&disk, &[100]);
    let id = wal.id();
    // As a growth of the file cut by a crash leaves it: a page of zeros.
    let file = disk.file(NAME);
    file.write_at(2 * PAGE, &[0u8; 4096]).unwrap();
    file.sync().unwrap();
    let scan = scan::scan(&image(&disk), id, 1);
    assert!(scan.is_intact(), "{scan:?}");
    assert_eq!(scan.unreadable_pages, [2]);
    let mut wal = Wal::resume(
        Box::new(disk.file(NAME)),
        id,
        1,
        SMALL,
        &scan.unreadable_pages,
    )
    .unwrap();
    // A record from page 1 into page 2; the power goes before page 2 reaches the disk.
    wal.append(&payload(2, 5000)).unwrap();
    let scan = scan::scan(&image(&disk.reboot(|_, page| page != 2)), id, 1);
    assert!(scan.is_intact(), "a torn tail, not damage: {:?}", scan.end);
    assert!(matches!(scan.end, End::Torn { lsn: 2, .. }));
}
