//! The binary's one global allocator: `System`, counting as it goes, for
//! the tests that bound memory (`hostile`, `limits`) and the leak gate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// The allocator (installed in `main.rs`).
pub struct Counting;

/// Live heap bytes, every thread's: the client, its tasks, the reaper, the
/// resolver's threads and the test server all count. Read under
/// [`serial`](super::serial), so no other test's allocations move it.
pub static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Allocation calls (reallocations included), every thread's.
pub static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Live heap bytes of the threads that opted in ([`counting_here`]), and
/// their peak.
pub static COUNTED_LIVE: AtomicIsize = AtomicIsize::new(0);
pub static COUNTED_PEAK: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread's allocations go to [`COUNTED_LIVE`] too.
pub fn counting_here(on: bool) {
    COUNTED.with(|counted| counted.set(on));
}

fn counted() -> bool {
    // After the thread-local is destroyed (a thread's last frees): not.
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

fn grew(size: isize) {
    LIVE.fetch_add(size, Ordering::Relaxed);
    if counted() {
        let live = COUNTED_LIVE.fetch_add(size, Ordering::Relaxed) + size;
        COUNTED_PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the same arguments and only
// adds relaxed counter updates (a const thread-local read allocates
// nothing), so `System`'s guarantees carry over unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received; the caller upholds `alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            grew(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received; `ptr` came from `alloc` above.
        unsafe { System.dealloc(ptr, layout) };
        grew(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as received; `ptr` came from `alloc` above and
        // `layout` is the one it was allocated with.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            grew(new_size as isize - layout.size() as isize);
        }
        new
    }
}
