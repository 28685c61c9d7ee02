//! A stdio server's pipes, read and written by tasks of the session: the
//! writer (which owns stdin; the wire writes a line straight in only when
//! the writer has none, see `StdinLane`), the stderr drain, and the
//! reader of stdout, which routes every message as the HTTP+SSE reader
//! does and, when stdout ends, ends the session with why.
//!
//! The writer is a task of the session, stopped first at release: that
//! closes the server's stdin, its signal to exit. The two readers are
//! tasks of the set below the process on the stack, stopped only once the
//! process has ended: a server that writes while it shuts down never
//! meets a closed pipe (a broken pipe would turn a clean exit into a
//! failure).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Engine, Era, Front, Generation};
use crate::error::Error;
use crate::scope::Spawner;
use crate::stdio::{Io, Lines, drain_stderr, ended_how, write_lines};

/// How long, after stdout ended, the reader waits for the process to
/// exit and for the rest of its stderr, to say why in the error.
const EXIT_WAIT: Duration = Duration::from_secs(2);

impl<F: Front> Engine<F> {
    /// Starts the tasks of a stdio server's pipes: the writer among the
    /// session's, the readers in `pipes` (the set below the process).
    /// Returns false when the session is already closing (what was not
    /// started is dropped, which closes its pipe).
    pub(crate) fn start_stdio(self: &Arc<Self>, io: Io, pipes: &Spawner) -> bool {
        let Ok(wire) = self.fresh_wire() else {
            return false;
        };
        // What messages are routed as while no generation is in use (the
        // probe, `initialize`): server requests over stdio are answered
        // the same way whatever the revision.
        let base = Arc::new(Generation {
            number: self.generations.fetch_add(1, Ordering::Relaxed) + 1,
            wire,
            owned: false,
            era: Era::Sessions,
        });
        let Io {
            stdin,
            stdout,
            stderr,
            outgoing,
            lane,
            tail,
            exit,
            program,
            max_line,
            max_batch,
            account,
            noise,
        } = io;
        let writer = self.spawner.spawn(move |closing| async move {
            tokio::select! {
                _ = closing.cancelled() => {}
                () = write_lines(stdin, lane, outgoing) => {}
            }
        });
        let drain_tail = tail.clone();
        let name = program.clone();
        let drain = pipes.spawn(move |closing| async move {
            tokio::select! {
                _ = closing.cancelled() => {}
                () = drain_stderr(stderr, drain_tail, name) => {}
            }
        });
        let engine = self.clone();
        let reader = pipes.spawn(move |closing| async move {
            let mut lines =
                Lines::new(stdout, max_line, max_batch, Some(account)).with_noise(noise);
            let read = async {
                loop {
                    match lines.next().await {
                        Ok(Some(message)) => {
                            let generation = engine.generation().unwrap_or_else(|| base.clone());
                            engine.route(&generation, message).await;
                        }
                        Ok(None) => return None,
                        Err(error) => return Some(error),
                    }
                }
            };
            let failed = tokio::select! {
                _ = closing.cancelled() => return,
                failed = read => failed,
            };
            tracing::debug!(
                skipped = lines.skipped(),
                "lines of stdout that were not JSON-RPC"
            );
            let error = match failed {
                Some(error) => error,
                None => tokio::select! {
                    _ = closing.cancelled() => return,
                    error = why_it_ended(&program, exit, &tail) => error,
                },
            };
            tracing::debug!(%error, "a stdio server's stdout ended");
            let generation = engine.generation().unwrap_or(base);
            engine.ended(&generation, error);
        });
        if !(writer && drain && reader) {
            self.current.send_replace(super::Current::Closed);
            return false;
        }
        true
    }
}

/// The error of a session whose server closed its stdout: its exit status
/// when it exits soon after, and the last lines of its stderr.
async fn why_it_ended(
    program: &str,
    mut exit: tokio::sync::watch::Receiver<Option<std::process::ExitStatus>>,
    tail: &crate::stdio::StderrTail,
) -> Error {
    let exited = tokio::time::timeout(EXIT_WAIT, exit.wait_for(Option::is_some))
        .await
        .ok()
        .and_then(|status| status.ok().and_then(|status| *status));
    // Its stderr ends with it: the last lines are what a user needs.
    if exited.is_some() {
        let _ = tokio::time::timeout(EXIT_WAIT, tail.closed()).await;
    }
    let what = match exited {
        Some(status) => format!("the stdio server `{program}` {}", ended_how(status)),
        None => format!("the stdio server `{program}` closed its stdout"),
    };
    let error = Error::server_exited(what);
    let stderr = tail.text();
    let stderr = stderr.trim_end();
    if stderr.trim().is_empty() {
        error
    } else {
        error.with_stderr(stderr)
    }
}
