//! The process-table helpers of `tests/it/support/processes.rs`, on real
//! process trees: a shell with two `sleep`s, orphaned or whole. Only that
//! file is compiled here (not all of `support`), so this binary builds in
//! seconds. Its tests take one lock each, so that
//! `assert_no_descendants` sees only its own test's children.
#![cfg(target_os = "linux")]

use crate::support::processes;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use processes::*;

/// How long a process may take to show up in, or leave, the table.
const WITHIN: Duration = Duration::from_secs(5);

/// The marker's name; each test's value is unique.
const MARKER: &str = "MCP_SCOPED_HTTP_TEST_MARKER";

/// One test at a time: the current process's descendants are every
/// running test's children (the binary's lock, held alone).
fn serial() -> crate::support::Serial {
    crate::support::serial()
}

fn unique_marker() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "processes-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `sh -c 'sleep 30 & exec sleep 30'` in a group of its own, marked: a
/// leader with a background child, the shape of a wrapper and its server.
/// Two processes and never a third (the `exec`: a shell may or may not fork
/// for its last command), so a snapshot of two is the whole tree.
fn tree(marker: &str) -> Group {
    Group::spawn(
        Command::new("sh")
            .args(["-c", "sleep 30 & exec sleep 30"])
            .env(MARKER, marker)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .expect("sh starts")
}

/// Polls `check` (bounded by [`WITHIN`]) until it holds; whether it did.
fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WITHIN;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn stat_lines_are_parsed_after_the_last_parenthesis() {
    let _shared = crate::support::shared();
    let line = "4242 (a) b) (c S 1 4) R 17 4242 4242 0 -1 4194560 104 0 0 0";
    assert_eq!(
        parse_stat(line),
        Some(Stat {
            pid: 4242,
            state: 'R',
            ppid: 17,
            pgrp: 4242,
            comm: "a) b) (c S 1 4".to_owned(),
        })
    );
    assert_eq!(parse_stat("4242 (sh) Z 17 9"), {
        Some(Stat {
            pid: 4242,
            state: 'Z',
            ppid: 17,
            pgrp: 9,
            comm: "sh".to_owned(),
        })
    });
    for broken in [
        "",
        "4242",
        "4242 (sh",
        "4242 (sh) R",
        "x (sh) R 1 2",
        "4242 (sh) R x 2",
    ] {
        assert_eq!(parse_stat(broken), None, "{broken:?}");
    }
    let me = stat(std::process::id()).expect("this process");
    assert_eq!(me.pid, std::process::id());
    assert!(me.is_live());
}

#[test]
fn a_tree_is_found_by_parentage_marker_and_group_and_killed_whole() {
    let _serial = serial();
    let marker = unique_marker();
    let group = tree(&marker);
    let leader = group.id();
    // The two views are read from /proc one after the other while the shell
    // may still be forking, and a process in the middle of its exec shows an
    // empty environ (seen in CI): they are compared once they agree.
    let mut members = Vec::new();
    assert!(
        eventually(|| {
            members = group.members();
            members.len() >= 2 && with_marker(MARKER, &marker) == members
        }),
        "the shell and its background sleep, all marked: {:?} in the group, {:?} marked\n{}",
        group.members(),
        with_marker(MARKER, &marker),
        describe(&group.members())
    );
    assert!(members.contains(&leader));
    let mine = descendants(std::process::id());
    for pid in &members {
        assert!(mine.contains(pid), "pid {pid} descends from this test");
    }
    assert!(!descendants(leader).is_empty(), "the leader has a child");
    assert!(!descendants(leader).contains(&leader));

    drop(group);
    // The drop waited: nothing of the tree is left, by any of the three.
    assert!(
        in_group(leader).is_empty(),
        "{}",
        describe(&in_group(leader))
    );
    assert_gone(&members, Duration::ZERO);
    assert_no_marker(MARKER, &marker, Duration::ZERO);
    assert_group_gone(leader, Duration::ZERO);
    assert_no_descendants(WITHIN);
}

#[test]
fn an_orphan_leaves_the_descendants_but_not_its_marker_nor_its_group() {
    let _serial = serial();
    let marker = unique_marker();
    let mut group = tree(&marker);
    let leader = group.id();
    assert!(eventually(|| group.members().len() >= 2));
    let members = group.members();
    let orphans: Vec<u32> = members.iter().copied().filter(|&p| p != leader).collect();

    // What a host does to a wrapper: SIGKILL to its pid alone.
    group.child().kill().expect("SIGKILL to the leader");
    group.child().wait().expect("reaped");
    assert!(
        eventually(|| {
            let mine = descendants(std::process::id());
            orphans.iter().all(|pid| !mine.contains(pid))
        }),
        "reparented away from this test"
    );
    for pid in &orphans {
        assert!(is_live(*pid), "the orphan {pid} lives on");
    }
    assert_eq!(with_marker(MARKER, &marker), orphans, "found by marker");
    assert_eq!(in_group(leader), orphans, "and by group");
    assert!(descendants(std::process::id()).is_empty());

    // The leader is reaped, yet its group (with the orphans) is killed.
    group.kill();
    assert_no_marker(MARKER, &marker, Duration::ZERO);
    assert_gone(&orphans, Duration::ZERO);
}

#[test]
fn the_checks_name_each_survivor() {
    let _serial = serial();
    let marker = unique_marker();
    let mut group = tree(&marker);
    assert!(eventually(|| group.members().len() >= 2));
    let members = group.members();
    let failed =
        std::panic::catch_unwind(|| assert_no_marker(MARKER, &marker, Duration::from_millis(50)))
            .expect_err("the tree is running");
    let message = failed
        .downcast_ref::<String>()
        .expect("a formatted message");
    for pid in &members {
        assert!(message.contains(&format!("pid {pid} ")), "{message}");
    }
    assert!(message.contains("sleep 30"), "{message}");
    assert!(std::panic::catch_unwind(|| assert_gone(&members, Duration::from_millis(50))).is_err());
    assert!(std::panic::catch_unwind(|| assert_no_descendants(Duration::from_millis(50))).is_err());
    group.kill();
    assert_gone(&members, Duration::ZERO);
}

#[test]
fn zombies_are_not_counted() {
    let _serial = serial();
    let mut child = Command::new("true").spawn().expect("true starts");
    let pid = child.id();
    // Not waited for yet: it exits and stays a zombie of this process.
    assert!(eventually(|| stat(pid).is_some_and(|s| s.state == 'Z')));
    assert!(!is_live(pid));
    assert!(!descendants(std::process::id()).contains(&pid));
    assert_gone(&[pid], Duration::ZERO);
    child.wait().expect("reaped");
    assert_eq!(stat(pid), None);
}

#[test]
fn signals_reach_one_pid_or_a_whole_group() {
    let _serial = serial();
    let marker = unique_marker();
    let mut group = tree(&marker);
    let leader = group.id();
    assert!(eventually(|| group.members().len() >= 2));
    let members = group.members();
    assert!(signal("TERM", leader), "the leader alone");
    group.child().wait().expect("reaped");
    // The leader alone: the rest of its group lives on. (Not a count of
    // `members`: the shell may not have forked its second child when they
    // were read.)
    let rest = in_group(leader);
    assert!(
        !rest.is_empty() && !rest.contains(&leader),
        "{rest:?} left of {members:?}"
    );
    assert!(signal_group("TERM", leader), "the rest");
    assert_group_gone(leader, WITHIN);
}
