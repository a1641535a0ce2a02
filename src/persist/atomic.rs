//! Atomic file replacement: write a temporary file beside the target, sync it, rename it
//! over the target, sync the folder. A failure at any step removes the temporary file and
//! leaves the target as it was (a reader sees the old file or the new one, never a part).

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

thread_local! {
    /// Bytes this thread's saves may still write before they fail ([`with_write_failure_after`]).
    static FAIL_AFTER: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Runs `f` with every save on this thread failing as a full disk would once `bytes` bytes of
/// the file were written (for tests of the rule that a failed save changes nothing).
#[doc(hidden)]
pub fn with_write_failure_after<T>(bytes: u64, f: impl FnOnce() -> T) -> T {
    FAIL_AFTER.with(|c| c.set(Some(bytes)));
    let out = f();
    FAIL_AFTER.with(|c| c.set(None));
    out
}

/// A writer that fails with `StorageFull` past the armed byte count.
struct Limited<W> {
    inner: W,
    left: Option<u64>,
}

impl<W: Write> Write for Limited<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(left) = self.left {
            if buf.len() as u64 > left {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    "no space left on device (simulated: persist::with_write_failure_after)",
                ));
            }
            self.left = Some(left - buf.len() as u64);
        }
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A temporary name beside `path`, unique within this process.
fn temporary(path: &Path) -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "the path does not name a file")
    })?;
    let tmp = format!(
        ".{}.kvpack-tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    Ok(path.with_file_name(tmp))
}

/// Replaces `path` with what `write` writes, atomically (see the module docs).
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<()> {
    let io_err = |p: &Path, e: io::Error| Error::Io {
        path: p.display().to_string(),
        source: e,
    };
    let tmp = temporary(path).map_err(|e| io_err(path, e))?;
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| io_err(&tmp, e))?;
    let written = (|| {
        let mut w = Limited {
            inner: BufWriter::with_capacity(1 << 20, file),
            left: FAIL_AFTER.with(Cell::get),
        };
        write(&mut w)?;
        let file: File = w.inner.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(&tmp, e));
    }
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(path, e));
    }
    // The rename is durable once the folder is synced (best effort: not every platform can
    // open a folder).
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
