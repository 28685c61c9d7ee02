//! What a churn run costs the client alone: heap allocations counted by an
//! allocator a binary installs, and CPU time less the in-process test
//! server's threads.
//!
//! Both leave the test kit server out: its threads mark themselves when they
//! start ([`mark_server_thread`]), so a run against the embedded server
//! measures the client the way a run against a server in another process
//! does.

// The one `unsafe` here is the `GlobalAlloc` impl, which only forwards.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The thread name the test kit server's runtime gives its threads.
pub(crate) const SERVER_THREAD_NAME: &str = "mcp-testkit";

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    // Const-initialized and without a destructor: reading it never
    // allocates or registers anything, so the allocator may.
    static SERVER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// The system allocator, counting every allocation (`alloc`,
/// `alloc_zeroed`, `realloc`) made by a thread that is not the test kit
/// server's. Install it in a bench or a binary to have [`Figures`] report
/// allocations per cycle:
///
/// ```no_run
/// #[global_allocator]
/// static ALLOCATOR: mcp_scoped_http_testkit::churn::CountingAllocator =
///     mcp_scoped_http_testkit::churn::CountingAllocator;
/// ```
///
/// The count is one relaxed atomic add per allocation, shared by all
/// threads: cheap, but not free under contention, and it costs both sides
/// of a comparison alike.
///
/// [`Figures`]: super::churn::Figures
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAllocator;

impl CountingAllocator {
    fn count() {
        if !SERVER_THREAD.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
    }
}

// SAFETY: every method forwards its arguments unchanged to `System`, which
// upholds `GlobalAlloc`'s contract; the counting around it neither
// allocates (a const thread-local without destructor, atomics) nor panics.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::count();
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::count();
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations counted so far, when a [`CountingAllocator`] is installed.
pub fn allocations() -> Option<u64> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| ALLOCATIONS.load(Ordering::Relaxed))
}

/// Leaves the calling thread out of the count (the test kit server's
/// threads call it when they start).
pub(crate) fn mark_server_thread() {
    SERVER_THREAD.with(|server| server.set(true));
}

/// CPU time (user + system) this process has used so far, less what the
/// test kit server's threads used (Linux; elsewhere the whole process, or
/// `None` where the platform does not tell).
pub fn client_cpu_time() -> Option<Duration> {
    let process = super::churn::process_cpu_time()?;
    Some(process.saturating_sub(server_cpu_time()))
}

/// CPU time of the live threads named [`SERVER_THREAD_NAME`], from
/// `/proc/self/task/*/schedstat` (nanoseconds on the CPU).
fn server_cpu_time() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let mut total = Duration::ZERO;
    for task in tasks.flatten() {
        let path = task.path();
        let is_server = std::fs::read_to_string(path.join("comm"))
            .is_ok_and(|comm| comm.trim_end().starts_with(SERVER_THREAD_NAME));
        if !is_server {
            continue;
        }
        let nanos = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|stat| stat.split_whitespace().next()?.parse::<u64>().ok());
        total += Duration::from_nanos(nanos.unwrap_or(0));
    }
    total
}

// The unit tests' binary counts, so the marking can be seen to work.
#[cfg(test)]
#[global_allocator]
static TEST_ALLOCATOR: CountingAllocator = CountingAllocator;

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocations counted while a thread (marked as the server's or not)
    /// makes `n` of its own.
    fn counted_while(n: usize, server: bool) -> u64 {
        let before = allocations().expect("installed in this binary");
        std::thread::spawn(move || {
            if server {
                mark_server_thread();
            }
            for i in 0..n {
                drop(std::hint::black_box(Box::new(i)));
            }
        })
        .join()
        .expect("join");
        allocations().expect("installed").saturating_sub(before)
    }

    #[test]
    fn a_server_threads_allocations_are_left_out() {
        const N: usize = 1_000_000;
        // Other tests run meanwhile and are counted: a million of their own
        // in the same few milliseconds would be needed to blur this.
        assert!(counted_while(N, false) >= N as u64);
        assert!(counted_while(N, true) < N as u64);
    }

    #[test]
    fn a_server_threads_cpu_is_left_out() {
        let busy = std::thread::Builder::new()
            .name(SERVER_THREAD_NAME.to_owned())
            .spawn(|| {
                let own = || {
                    let time = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
                    Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
                };
                let mut x = 0u64;
                while own() < Duration::from_millis(150) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                // Stay alive until measured: a thread that has exited is
                // no longer in /proc.
                std::thread::park();
                x
            })
            .expect("spawn");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while server_cpu_time() < Duration::from_millis(100) {
            assert!(
                std::time::Instant::now() < deadline,
                "the server thread's CPU is never seen"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let process = super::super::churn::process_cpu_time().expect("process cpu");
        let client = client_cpu_time().expect("client cpu");
        assert!(
            process.saturating_sub(client) >= Duration::from_millis(100),
            "{process:?} {client:?}"
        );
        busy.thread().unpark();
        busy.join().expect("join");
    }
}
