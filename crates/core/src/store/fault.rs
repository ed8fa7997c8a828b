//! `FaultyDevice`: a redb storage backend over a file whose writes and syncs can be made to
//! fail (after a budget of operations, or while a switch is on) or to hang, as a full disk,
//! a failing device or a stuck controller would. It serves the fault-injection tests and
//! operators who want to see their monitoring react (`RedbStore::open_with_backend`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use parking_lot::{Condvar, Mutex};

/// The switches of a [`FaultyDevice`], shared with whoever drives the faults.
#[derive(Debug)]
pub struct Faults {
    /// Writes, syncs and resizes allowed before they fail; `i64::MAX` never runs out.
    pub budget: AtomicI64,
    /// While set, writes, syncs and resizes fail.
    pub failing: AtomicBool,
    stalled: Mutex<bool>,
    resumed: Condvar,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            budget: AtomicI64::new(i64::MAX),
            failing: AtomicBool::new(false),
            stalled: Mutex::new(false),
            resumed: Condvar::new(),
        }
    }
}

impl Faults {
    /// While `stalled`, syncs block (as on a hung device) until it is cleared.
    pub fn stall(&self, stalled: bool) {
        *self.stalled.lock() = stalled;
        self.resumed.notify_all();
    }

    fn spend(&self) -> Result<(), std::io::Error> {
        if self.failing.load(Ordering::SeqCst) || self.budget.fetch_sub(1, Ordering::SeqCst) <= 0 {
            return Err(std::io::Error::other("injected I/O failure"));
        }
        Ok(())
    }
}

/// A file backend with injectable faults.
#[derive(Debug)]
pub struct FaultyDevice {
    inner: redb::backends::FileBackend,
    faults: Arc<Faults>,
}

impl FaultyDevice {
    /// A device over `file` (opened read and write), driven through `faults`.
    pub fn new(file: std::fs::File, faults: Arc<Faults>) -> std::io::Result<Self> {
        let inner = redb::backends::FileBackend::new(file).map_err(std::io::Error::other)?;
        Ok(Self { inner, faults })
    }

    /// A device over the file at `path` (created if missing, kept if not), driven
    /// through `faults`.
    pub fn at(path: &std::path::Path, faults: Arc<Faults>) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        Self::new(file, faults)
    }
}

impl redb::StorageBackend for FaultyDevice {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.faults.spend()?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        let mut stalled = self.faults.stalled.lock();
        while *stalled {
            self.faults.resumed.wait(&mut stalled);
        }
        drop(stalled);
        self.faults.spend()?;
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.faults.spend()?;
        self.inner.write(offset, data)
    }
}
