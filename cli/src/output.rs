//! Standard output. Written in place by the one-shot commands; for the
//! `fleet` command ([`aside`]) through a bounded queue to a thread of its
//! own, so that a host that stops reading our stdout never makes the loop
//! that serves signals and stdin wait: past the queue's bounds a line is
//! dropped and counted, and a line saying how many were lost comes before
//! the next one written.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Lines waiting to be written, at most.
const MAX_LINES: usize = 1024;

/// Bytes waiting to be written, at most; a line into an empty queue is
/// taken whatever its size (an answer as large as a session's budget).
const MAX_BYTES: usize = 32 << 20;

struct Aside {
    lines: Mutex<Option<SyncSender<String>>>,
    queued: AtomicUsize,
    dropped: AtomicU64,
    written: Mutex<Option<Receiver<()>>>,
    json: bool,
}

static ASIDE: OnceLock<Aside> = OnceLock::new();

/// From now on, lines are written by a thread of their own (`json`: the
/// line about lost lines is JSON). Once per process.
pub(crate) fn aside(json: bool) -> std::io::Result<()> {
    let (lines, queue) = sync_channel::<String>(MAX_LINES);
    let (done, written) = sync_channel(1);
    std::thread::Builder::new()
        .name("stdout".into())
        .spawn(move || {
            for line in queue {
                let Some(aside) = ASIDE.get() else { break };
                aside.queued.fetch_sub(line.len(), Ordering::AcqRel);
                let dropped = aside.dropped.swap(0, Ordering::AcqRel);
                let mut out = std::io::stdout().lock();
                if dropped > 0 {
                    let _ = if aside.json {
                        writeln!(out, r#"{{"event":"output","dropped":{dropped}}}"#)
                    } else {
                        writeln!(out, "output: {dropped} lines dropped (stdout was not read)")
                    };
                }
                let _ = writeln!(out, "{line}");
            }
            let _ = done.send(());
        })?;
    let installed = ASIDE.set(Aside {
        lines: Mutex::new(Some(lines)),
        queued: AtomicUsize::new(0),
        dropped: AtomicU64::new(0),
        written: Mutex::new(Some(written)),
        json,
    });
    // A second call keeps the first writer; this thread ends with its
    // dropped sender.
    drop(installed);
    Ok(())
}

/// Writes `line` and a newline: in place, or queued without waiting.
pub(crate) fn write_line(line: String) {
    let Some(aside) = ASIDE.get() else {
        let _ = writeln!(std::io::stdout().lock(), "{line}");
        return;
    };
    let guard = aside.lines.lock().unwrap_or_else(|e| e.into_inner());
    let Some(lines) = guard.as_ref() else {
        return;
    };
    let len = line.len();
    let before = aside.queued.fetch_add(len, Ordering::AcqRel);
    if before > 0 && before + len > MAX_BYTES {
        aside.queued.fetch_sub(len, Ordering::AcqRel);
        aside.dropped.fetch_add(1, Ordering::AcqRel);
        return;
    }
    match lines.try_send(line) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            aside.queued.fetch_sub(len, Ordering::AcqRel);
            aside.dropped.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Writes what is queued, waiting for stdout at most `within`; then the
/// process may exit (a stdout nobody reads keeps the rest).
pub(crate) fn finish(within: Duration) {
    let Some(aside) = ASIDE.get() else { return };
    drop(aside.lines.lock().unwrap_or_else(|e| e.into_inner()).take());
    let written = aside
        .written
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(written) = written {
        let _ = written.recv_timeout(within);
    }
}
