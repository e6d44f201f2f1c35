//! Where the embedded store's bytes go: the redb file and the write-ahead log, on real files, or
//! on a [`SimulatedDisk`] that keeps synced and unsynced bytes apart and can lose power, so
//! tests can check the disk contract itself (what a kill -9 cannot: the operating system keeps
//! its page cache when a process dies, and loses it only when the machine does).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::io;
use std::sync::Arc;

use parking_lot::Mutex;

/// The write-ahead log's file. Offsets are absolute; nothing is buffered above it.
pub trait LogFile: Send + Sync + Debug {
    /// The file's size in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Makes every byte written so far durable (fdatasync).
    fn sync(&self) -> io::Result<()>;
    /// New bytes read as zeros.
    fn set_len(&self, len: u64) -> io::Result<()>;
}

/// The log on a real file.
#[derive(Debug)]
pub struct FileLog(std::fs::File);

impl FileLog {
    /// Opens the log, making it (mode 0600) if it does not exist.
    pub fn open(path: &std::path::Path) -> io::Result<Self> {
        tenax_core::secrets::files::open_private(path, "the store's write-ahead log").map(Self)
    }
}

impl LogFile for FileLog {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.0, buf, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, data, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

/// The unit in which unsynced writes reach, or miss, the disk when the power goes.
const PAGE: u64 = 4096;

/// A disk for tests: each file has the bytes that were synced and the bytes that were only
/// written. [`SimulatedDisk::fail_after`] cuts the power at a chosen write or sync: that one
/// and every later one fail. [`SimulatedDisk::reboot`] gives the disk as it would be found
/// afterwards: what was synced, plus whichever unsynced pages the caller lets through.
#[derive(Debug, Clone, Default)]
pub struct SimulatedDisk(Arc<Mutex<DiskState>>);

#[derive(Debug, Default)]
struct DiskState {
    files: BTreeMap<String, SimulatedBytes>,
    /// Writes, resizes and syncs so far.
    operations: u64,
    /// The operation at which the power goes; `None`: it never does.
    cut_at: Option<u64>,
}

#[derive(Debug, Default, Clone)]
struct SimulatedBytes {
    /// What a reader sees now.
    live: Vec<u8>,
    /// What survives a power cut.
    durable: Vec<u8>,
    /// Pages written (or resized) since the last sync.
    dirty: BTreeSet<u64>,
}

/// An offset or size of a simulated file as an index: the file is in memory, so it fits.
fn at(n: u64) -> usize {
    usize::try_from(n).expect("a simulated file fits in memory")
}

fn power_off() -> io::Error {
    io::Error::other("the simulated disk lost power")
}

impl DiskState {
    /// Counts one operation; fails it, and all after it, once the power is off.
    fn operate(&mut self) -> io::Result<()> {
        self.operations += 1;
        match self.cut_at {
            Some(at) if self.operations >= at => Err(power_off()),
            _ => Ok(()),
        }
    }
}

impl SimulatedDisk {
    pub fn new() -> Self {
        Self::default()
    }

    /// Cuts the power at the `n`th write, resize or sync from now (1: the next one).
    pub fn fail_after(&self, n: u64) {
        let mut state = self.0.lock();
        state.cut_at = Some(state.operations + n.max(1));
    }

    /// Writes, resizes and syncs made so far.
    pub fn operations(&self) -> u64 {
        self.0.lock().operations
    }

    /// Whether the power has gone.
    pub fn is_off(&self) -> bool {
        let state = self.0.lock();
        state.cut_at.is_some_and(|at| state.operations >= at)
    }

    /// The disk as found after the power came back: per file, the synced bytes, and each page
    /// written since the last sync for which `keep(file, page)` says it reached the platter.
    pub fn reboot(&self, mut keep: impl FnMut(&str, u64) -> bool) -> SimulatedDisk {
        let state = self.0.lock();
        let files = state
            .files
            .iter()
            .map(|(name, bytes)| {
                let mut image = bytes.durable.clone();
                for page in &bytes.dirty {
                    if !keep(name, *page) {
                        continue;
                    }
                    let start = page * PAGE;
                    let end = (start + PAGE).min(bytes.live.len() as u64);
                    if start >= end {
                        continue;
                    }
                    let (start, end) = (at(start), at(end));
                    if image.len() < end {
                        image.resize(end, 0);
                    }
                    image[start..end].copy_from_slice(&bytes.live[start..end]);
                }
                let survived = SimulatedBytes {
                    live: image.clone(),
                    durable: image,
                    dirty: BTreeSet::new(),
                };
                (name.clone(), survived)
            })
            .collect();
        SimulatedDisk(Arc::new(Mutex::new(DiskState {
            files,
            operations: 0,
            cut_at: None,
        })))
    }

    /// The bytes of file `name` as a reader sees them now (`None`: no such file). After
    /// [`SimulatedDisk::reboot`], what survived: a test writes them out as real files.
    pub fn contents(&self, name: &str) -> Option<Vec<u8>> {
        self.0.lock().files.get(name).map(|f| f.live.clone())
    }

    /// A file of this disk.
    pub fn file(&self, name: &str) -> SimulatedFile {
        self.0.lock().files.entry(name.to_owned()).or_default();
        SimulatedFile {
            disk: self.clone(),
            name: name.to_owned(),
        }
    }

    fn with<T>(&self, name: &str, f: impl FnOnce(&mut SimulatedBytes) -> T) -> T {
        let mut state = self.0.lock();
        f(state.files.entry(name.to_owned()).or_default())
    }
}

/// A file of a [`SimulatedDisk`]: serves as redb's storage or as the log.
#[derive(Debug, Clone)]
pub struct SimulatedFile {
    disk: SimulatedDisk,
    name: String,
}

impl SimulatedFile {
    fn operate(&self) -> io::Result<()> {
        self.disk.0.lock().operate()
    }

    fn length(&self) -> u64 {
        self.disk.with(&self.name, |f| f.live.len() as u64)
    }

    fn read_into(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.disk.with(&self.name, |f| {
            let end = offset
                .checked_add(out.len() as u64)
                .filter(|end| *end <= f.live.len() as u64)
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            out.copy_from_slice(&f.live[at(offset)..at(end)]);
            Ok(())
        })
    }

    fn write_bytes(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.operate()?;
        self.disk.with(&self.name, |f| {
            let end = at(offset) + data.len();
            if f.live.len() < end {
                f.live.resize(end, 0);
            }
            f.live[at(offset)..end].copy_from_slice(data);
            if !data.is_empty() {
                f.dirty.extend(offset / PAGE..=(end as u64 - 1) / PAGE);
            }
            Ok(())
        })
    }

    fn resize(&self, len: u64) -> io::Result<()> {
        self.operate()?;
        self.disk.with(&self.name, |f| {
            let old = f.live.len() as u64;
            f.live.resize(at(len), 0);
            let (low, high) = (old.min(len), old.max(len));
            if high > low {
                f.dirty.extend(low / PAGE..=(high - 1) / PAGE);
            }
            Ok(())
        })
    }

    fn sync_bytes(&self) -> io::Result<()> {
        self.operate()?;
        self.disk.with(&self.name, |f| {
            f.durable.resize(f.live.len(), 0);
            for page in std::mem::take(&mut f.dirty) {
                let start = at(page * PAGE);
                let end = (start + at(PAGE)).min(f.live.len());
                if start < end {
                    f.durable[start..end].copy_from_slice(&f.live[start..end]);
                }
            }
            Ok(())
        })
    }
}

impl LogFile for SimulatedFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.length())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_into(offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write_bytes(offset, data)
    }

    fn sync(&self) -> io::Result<()> {
        self.sync_bytes()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.resize(len)
    }
}

impl redb::StorageBackend for SimulatedFile {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.length())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.read_into(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.resize(len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.sync_bytes()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.write_bytes(offset, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_synced_bytes_survive_unless_let_through() {
        let disk = SimulatedDisk::new();
        let file = disk.file("f");
        file.write_at(0, b"synced").unwrap();
        file.sync().unwrap();
        file.write_at(0, b"SYNCED and more").unwrap();
        let strict = disk.reboot(|_, _| false).file("f");
        let mut buf = vec![0; 6];
        strict.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, b"synced");
        assert_eq!(strict.size().unwrap(), 6);
        let lucky = disk.reboot(|_, _| true).file("f");
        let mut buf = vec![0; 15];
        lucky.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, b"SYNCED and more");
    }

    #[test]
    fn the_power_goes_at_the_chosen_operation_and_stays_off() {
        let disk = SimulatedDisk::new();
        let file = disk.file("f");
        disk.fail_after(3);
        file.write_at(0, b"a").unwrap();
        file.sync().unwrap();
        assert!(file.write_at(1, b"b").is_err(), "the third operation fails");
        assert!(disk.is_off());
        assert!(file.sync().is_err());
        let after = disk.reboot(|_, _| true).file("f");
        assert_eq!(after.size().unwrap(), 1, "the failed write never happened");
    }
}
