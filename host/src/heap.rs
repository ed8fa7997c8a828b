//! The process's allocator: mimalloc, with a live-bytes count a benchmark can switch on.
//!
//! mimalloc instead of the system allocator: a request allocates and frees many small
//! objects across two threads, and glibc's malloc spent about a tenth of the server's CPU
//! on them under load (measured with `perf` on the sync `tools/call` path).
//!
//! Resident memory is a poor measure of what a data structure costs under an allocator that
//! keeps freed pages for reuse (a structure built after a larger one was freed adds nothing
//! to it), so `snodo bench runner` counts heap bytes instead: while counting is on, every
//! allocation adds its size and every free subtracts it. Off, the count costs one relaxed
//! load of a flag that never changes, per allocation.

// A global allocator is an `unsafe` trait; this module is the one place the binary needs it.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// mimalloc, counting live bytes while [`counting`] is on.
pub(crate) struct Heap;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);

/// Starts counting (from zero) and returns a guard that stops it when dropped.
pub(crate) fn counting() -> Counting {
    LIVE.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    Counting
}

/// Counting is on while this lives.
pub(crate) struct Counting;

impl Counting {
    /// Bytes allocated and not freed since counting started (negative when more was freed
    /// than allocated).
    pub(crate) fn live(&self) -> i64 {
        LIVE.load(Ordering::Relaxed)
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        COUNTING.store(false, Ordering::Relaxed);
    }
}

fn count(delta: i64) {
    if COUNTING.load(Ordering::Relaxed) {
        LIVE.fetch_add(delta, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed to mimalloc unchanged; the count is bookkeeping beside it.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: the caller upholds `alloc`'s contract, which mimalloc's has.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as i64));
        // SAFETY: `ptr` came from this allocator with `layout`.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: as for `alloc`.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64);
        // SAFETY: `ptr` came from this allocator with `layout`; the caller upholds the rest.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}
