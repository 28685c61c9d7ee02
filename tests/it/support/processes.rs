//! The process table, for the baseline check of the tests that start
//! processes (peers, proxies, servers, stdio servers and their wrappers):
//! every process a test starts is gone when it ends. Linux only, std only:
//! it reads `/proc` and signals through `kill(1)`.
//!
//! Three ways to find what a test left, because none sees everything:
//!
//! - [`descendants`] of a pid: every live process whose parent chain reaches
//!   it. A process whose parent died is reparented to init (or the nearest
//!   subreaper) and stops being anyone's descendant, which is exactly what
//!   a wrapper that does not forward signals produces; so this sees what is
//!   still attached, not what escaped.
//! - [`with_marker`]: processes whose environment holds `NAME=VALUE`. A test
//!   gives its child a unique marker, which every descendant inherits (unless
//!   someone clears the environment on the way), reparented or not.
//! - [`in_group`]: the live members of a process group. Reparenting keeps the
//!   group; only a process that makes a group or session of its own leaves
//!   it.
//!
//! The crate's stdio launcher (`comm` `mcp-launcher`: one per host process,
//! alive as long as it, forking each server's watchdog) is no test's
//! process: [`descendants`] walks through it but does not list it. A
//! watchdog it forked has the launcher's (empty) environment, not the
//! server's: [`with_marker`] lists it as the parent of a marked process
//! (it lives only while it has a child, and every process of its tree is
//! marked).
//!
//! Zombies (state `Z`) are not counted anywhere: they run nothing and hold
//! no memory, and an orphan's zombie waits for init to reap it (here, up to
//! about 2 s).
//!
//! Tests in one binary run on threads of one process, so the current
//! process's descendants include every running test's children:
//! [`assert_no_descendants`] holds only for a binary whose tests run one at
//! a time (`--test-threads 1`) or at its very end. A test that shares its
//! process checks its own processes: [`assert_gone`] with the pids it saw,
//! [`assert_no_marker`] with its marker, [`assert_group_gone`] with its
//! group.
//!
//! [`Group`] starts a child in a process group of its own and kills the
//! whole group on drop: what every long-lived child of a test should be.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How often the `assert_*` functions and [`Group::kill`] look again.
const POLL: Duration = Duration::from_millis(10);
/// How long [`Group::kill`] waits for the group's members to die after
/// SIGKILL (bounded: a drop must not hang).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// What `/proc/<pid>/stat` says of a process, the fields used here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Its id.
    pub pid: u32,
    /// Its state: `R`, `S`, `D`, `T`, `Z` (zombie), ...
    pub state: char,
    /// Its parent's id.
    pub ppid: u32,
    /// Its process group's id.
    pub pgrp: u32,
    /// Its command name (`comm`, at most 15 bytes).
    pub comm: String,
}

impl Stat {
    /// Whether it runs (or could): anything but a zombie or a dead task.
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses a `/proc/<pid>/stat` line: `pid (comm) state ppid pgrp ...`. The
/// command may hold spaces and parentheses, `)` included, and is at most
/// 16 bytes, so the fields start after the *last* `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let (head, tail) = text.rsplit_once(')')?;
    let (pid, comm) = head.split_once(" (")?;
    let pid = pid.trim().parse().ok()?;
    let mut fields = tail.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Stat {
        pid,
        state,
        ppid,
        pgrp,
        comm: comm.to_owned(),
    })
}

/// The stat of `pid`, or `None` when it is gone (or unreadable).
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether `pid` is a live process (a zombie is not).
pub fn is_live(pid: u32) -> bool {
    stat(pid).is_some_and(|s| s.is_live())
}

/// Every process in `/proc` now, each read once. The table is not a
/// snapshot: a process may start or end while it is read, so callers poll.
pub fn all() -> Vec<Stat> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .collect()
}

/// Every live process whose parent chain reaches `pid` (not `pid` itself),
/// zombies excluded.
pub fn descendants(pid: u32) -> Vec<u32> {
    let table = all();
    let mut children: HashMap<u32, Vec<&Stat>> = HashMap::new();
    for process in &table {
        children.entry(process.ppid).or_default().push(process);
    }
    let mut found = Vec::new();
    // Seen once each: the table is read process by process, not at one
    // instant, so a racing read could show a cycle.
    let mut seen = HashSet::from([pid]);
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if !seen.insert(child.pid) {
                continue;
            }
            // A zombie has no children of its own (they were reparented
            // when it exited): it is skipped, and walking it finds nothing.
            // The launcher is the crate's, for the host's life: walked, not
            // listed.
            if child.is_live() && child.comm != LAUNCHER {
                found.push(child.pid);
            }
            next.push(child.pid);
        }
    }
    found.sort_unstable();
    found
}

/// The live processes whose environment (`/proc/<pid>/environ`) holds
/// exactly `name=value`; entries that cannot be read (another user's, or
/// gone meanwhile) are skipped, and a zombie's environment reads empty.
pub fn with_marker(name: &str, value: &str) -> Vec<u32> {
    let wanted = format!("{name}={value}").into_bytes();
    let table = all();
    let by_pid: HashMap<u32, &Stat> = table.iter().map(|process| (process.pid, process)).collect();
    let marked: Vec<&Stat> = table
        .iter()
        .filter(|process| process.is_live())
        .filter(|process| {
            fs::read(format!("/proc/{}/environ", process.pid))
                .is_ok_and(|environ| environ.split(|&b| b == 0).any(|var| var == wanted))
        })
        .collect();
    // And the launcher's watchdogs over them (see the module docs).
    let watchdogs = marked.iter().filter_map(|process| {
        by_pid
            .get(&process.ppid)
            .filter(|parent| parent.is_live() && parent.comm == WATCHDOG)
            .map(|parent| parent.pid)
    });
    let mut found: Vec<u32> = marked
        .iter()
        .map(|process| process.pid)
        .chain(watchdogs)
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// The `comm` of the crate's stdio launcher.
pub const LAUNCHER: &str = "mcp-launcher";
/// The `comm` of a stdio server's watchdog.
pub const WATCHDOG: &str = "mcp-watchdog";

/// The live members of process group `pgid`.
pub fn in_group(pgid: u32) -> Vec<u32> {
    let mut found: Vec<u32> = all()
        .into_iter()
        .filter(|process| process.pgrp == pgid && process.is_live())
        .map(|process| process.pid)
        .collect();
    found.sort_unstable();
    found
}

/// The command line of `pid`, its arguments joined by spaces, for
/// messages (empty when gone).
pub fn cmdline(pid: u32) -> String {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|word| !word.is_empty())
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect();
    words.join(" ")
}

/// One line per process, for a panic message: pid, parent, group, state,
/// command line.
pub fn describe(pids: &[u32]) -> String {
    pids.iter()
        .map(|&pid| match stat(pid) {
            Some(s) => format!(
                "  pid {pid} (parent {}, group {}, state {}): {}\n",
                s.ppid,
                s.pgrp,
                s.state,
                cmdline(pid)
            ),
            None => format!("  pid {pid}: gone meanwhile\n"),
        })
        .collect()
}

/// Polls `survivors` every [`POLL`] until it is empty or `within` is over;
/// then panics naming each survivor and `what` they are.
fn assert_empty(what: &str, within: Duration, mut survivors: impl FnMut() -> Vec<u32>) {
    let deadline = Instant::now() + within;
    loop {
        let left = survivors();
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "{} {what} still running after {within:?}:\n{}",
                left.len(),
                describe(&left)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// Panics unless the current process has no live descendant within
/// `within`. Every running test of this binary counts (they are threads
/// of this process): use it where the tests run one at a time, and
/// [`assert_gone`], [`assert_no_marker`] or [`assert_group_gone`] in a
/// test that shares its process.
pub fn assert_no_descendants(within: Duration) {
    let me = std::process::id();
    assert_empty("descendants of this test process", within, || {
        descendants(me)
    });
}

/// Panics unless every one of `pids` is gone (or a zombie) within `within`.
pub fn assert_gone(pids: &[u32], within: Duration) {
    assert_empty("of the processes expected gone", within, || {
        pids.iter().copied().filter(|&pid| is_live(pid)).collect()
    });
}

/// Panics unless no live process holds `name=value` in its environment
/// within `within`.
pub fn assert_no_marker(name: &str, value: &str, within: Duration) {
    assert_empty(
        &format!("processes with {name}={value} in their environment"),
        within,
        || with_marker(name, value),
    );
}

/// Panics unless process group `pgid` has no live member within `within`.
pub fn assert_group_gone(pgid: u32, within: Duration) {
    assert_empty(&format!("members of process group {pgid}"), within, || {
        in_group(pgid)
    });
}

/// Sends `signal` (a name, `TERM`, or a number) to `pid` alone, through
/// `kill(1)`; whether it was delivered.
pub fn signal(signal: &str, pid: u32) -> bool {
    run_kill(signal, &pid.to_string())
}

/// Sends `signal` to every member of process group `pgid`; whether it was
/// delivered (to at least one).
pub fn signal_group(signal: &str, pgid: u32) -> bool {
    run_kill(signal, &format!("-{pgid}"))
}

fn run_kill(signal: &str, target: &str) -> bool {
    Command::new("kill")
        .args(["-s", signal, "--", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A child started in a process group of its own (its pid is the group's
/// id), so that whatever it forks stays findable and killable with it:
/// on drop (or [`kill`](Self::kill)) SIGKILL goes to the whole group, the
/// leader is reaped, and the drop waits (bounded) until no member lives.
///
/// A member that makes a group or session of its own (a daemon's `setsid`)
/// escapes the group; none of the peers here does.
pub struct Group {
    child: Child,
    /// Whether the group was killed and the leader reaped already.
    done: bool,
}

impl Group {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> io::Result<Group> {
        std::os::unix::process::CommandExt::process_group(command, 0);
        let child = command.spawn()?;
        Ok(Group { child, done: false })
    }

    /// The leader's pid, which is the group's id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The leader, for its pipes and its status. Reaping it (`wait`,
    /// `try_wait`) is fine: its pid stays the group's id while any member
    /// lives, and the group is killed only while it has members.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The live members now (the leader among them while it runs).
    pub fn members(&self) -> Vec<u32> {
        in_group(self.id())
    }

    /// SIGKILL to the whole group, the leader reaped, then a bounded wait
    /// until no member lives (an orphan member is reaped by init, but a
    /// zombie does not count). Idempotent; never panics, as drop calls it.
    pub fn kill(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        let pgid = self.id();
        // Only while it has members: a group without any frees its id,
        // which an unrelated process could then take.
        if !in_group(pgid).is_empty() {
            signal_group("KILL", pgid);
        }
        // The leader for sure (in case it left the group), then reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let deadline = Instant::now() + KILL_WAIT;
        while !in_group(pgid).is_empty() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
    }
}

/// `command.spawn_group()` where `command.spawn()` was: [`Group::spawn`] at
/// the end of a builder chain.
pub trait SpawnGroup {
    /// Spawns it as the leader of a new process group: [`Group::spawn`].
    fn spawn_group(&mut self) -> io::Result<Group>;
}

impl SpawnGroup for Command {
    fn spawn_group(&mut self) -> io::Result<Group> {
        Group::spawn(self)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}
