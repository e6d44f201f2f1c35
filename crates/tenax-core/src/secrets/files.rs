//! Files only their owner may read. The data directory is made with mode 0700 and every file
//! Tenax makes in it with 0600 (the store, its log, the secrets key, the first admin token,
//! and any temporary file on the way to one), so that other users of the machine read none of
//! it, whatever the umask.
//!
//! A directory or file found looser than that is left as it is (the operator may have a
//! reason: a backup agent of another user) and named in a warning at start, with its mode and
//! the command that closes it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

/// The mode of the directories Tenax makes.
pub const DIR_MODE: u32 = 0o700;
/// The mode of the files Tenax makes.
pub const FILE_MODE: u32 = 0o600;

/// Whether others than the owner may do anything with a file of mode `mode`.
fn loose(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// Makes directory `path` (and any missing parent) with mode 0700; warns if it already exists
/// with a looser mode.
pub fn private_dir(path: &Path) -> io::Result<()> {
    if !path.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(path)?;
        return Ok(());
    }
    warn_if_loose(path, "the data directory");
    Ok(())
}

/// Warns, naming `what`, its path and its mode, if others than its owner may use `path`.
/// A path that cannot be read is left to the operation that needs it to report.
pub fn warn_if_loose(path: &Path, what: &str) {
    let Ok(metadata) = std::fs::metadata(path) else {
        return;
    };
    let mode = metadata.permissions().mode() & 0o777;
    if loose(mode) {
        let wanted = if metadata.is_dir() {
            DIR_MODE
        } else {
            FILE_MODE
        };
        tracing::warn!(
            path = %path.display(),
            mode = %format!("{mode:04o}"),
            "{what} may be read by other users of this machine; `chmod {wanted:o} {}` closes it",
            path.display()
        );
    }
}

/// Opens `path` to read and write, making it with mode 0600 if it does not exist; warns if it
/// exists with a looser mode.
pub fn open_private(path: &Path, what: &str) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)?;
    warn_if_loose(path, what);
    Ok(file)
}

/// Writes `text` to a file only its owner can read, whole or not at all: the text goes to a
/// hidden sibling first, is synced, and is then renamed into place, so a reader that sees the
/// file (an operator, a script waiting for it) never reads it half-written.
pub fn write_private(path: &Path, text: &str) -> io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let partial = path.with_file_name(format!(".{name}.partial"));
    // A leftover from a crash is removed, never reused: its mode could be wider than 0600.
    match std::fs::remove_file(&partial) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(&partial)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&partial, path)?;
    sync_parent(path)
}

/// Makes a rename or a new file in `path`'s directory durable.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => File::open(".")?.sync_all(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn what_tenax_makes_only_its_owner_may_read() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("a/data");
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&top.path().join("a")), 0o700);
        let file = dir.join("f");
        open_private(&file, "a file").unwrap();
        assert_eq!(mode(&file), 0o600);
        let written = dir.join("w");
        write_private(&written, "text").unwrap();
        assert_eq!(mode(&written), 0o600);
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "text");
        // Written again: replaced whole.
        write_private(&written, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "new");
        assert!(loose(0o644) && loose(0o755) && loose(0o640) && loose(0o701));
        assert!(!loose(0o600) && !loose(0o700) && !loose(0o400));
    }

    #[test]
    fn an_existing_file_keeps_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        open_private(&file, "a file").unwrap();
        assert_eq!(mode(&file), 0o644);
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
    }
}
