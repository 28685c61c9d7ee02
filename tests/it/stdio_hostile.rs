//! stdio servers against a hostile host environment: the watchdog killed
//! before it reports, a server environment that would break it
//! (`LD_PRELOAD`, `LD_LIBRARY_PATH`), arguments the system refuses, a
//! `setsid` child of a live server at the release's SIGTERM step, no
//! `/proc`, the watchdog's file removed by a temporary-file cleaner, a
//! first spawn out of descriptors, the watchdog killed from outside, bytes
//! that are not UTF-8. Each ends with nothing of its tree left.
//!
//! Some re-run this binary as a helper process (in a mount namespace
//! without `/proc`, with SIGCHLD ignored, at a descriptor limit): those
//! need `unshare` and root, as CI has.

#![cfg(all(unix, feature = "stdio"))]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcp_scoped_http::Connector;
use mcp_scoped_http::stdio::{Grace, ProcessEnd, StdioCommand};

const MARKER: &str = "MCP_ATTACK_MARKER";

/// One test at a time: fd counts and process scans are process-wide (the
/// binary's lock, held alone until the test ends).
async fn serial() -> crate::support::Serial {
    crate::support::serial()
}

fn unique(tag: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

fn server_py() -> &'static str {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/support/stdio_server.py"
    )
}

fn fixture(marker: &str, args: &[&str]) -> StdioCommand {
    StdioCommand::new("python3")
        .arg("-u")
        .arg(server_py())
        .args(args)
        .env(MARKER, marker)
}

/// Processes whose environment holds MARKER=marker, and the launcher's
/// watchdogs over them (see `support::processes::with_marker`).
fn marked(marker: &str) -> Vec<i32> {
    crate::support::processes::with_marker(MARKER, marker)
        .into_iter()
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect()
}

/// Kills what is left of a marker on drop.
struct Sweep(String);
impl Drop for Sweep {
    fn drop(&mut self) {
        for pid in marked(&self.0) {
            // SAFETY: a signal to a leftover process of this test.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(tag));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// An `LD_LIBRARY_PATH` meant for the server that holds a libc nothing
/// can load (an empty `libc.so.6`) never reaches the watchdog (its
/// environment is empty): the server fails to start and the connect fails
/// at once, not at its timeout.
#[tokio::test]
async fn a_server_ld_library_path_does_not_hang_the_connect() {
    let _serial = serial().await;
    let dir = temp_dir("ldpath");
    std::fs::write(dir.join("libc.so.6"), b"").expect("write");
    let marker = unique("ldpath");
    let _sweep = Sweep(marker.clone());
    let started = Instant::now();
    let result = Connector::stdio(
        StdioCommand::new("/bin/sh")
            .args(["-c", "exit 3"])
            .env(MARKER, &marker)
            .env("LD_LIBRARY_PATH", dir.as_os_str()),
    )
    .connect_timeout(Duration::from_secs(15))
    .connect()
    .await;
    let elapsed = started.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    let error = result.expect_err("nothing can run with that libc");
    eprintln!("after {elapsed:?}: {error}");
    assert!(
        elapsed < Duration::from_secs(5),
        "the connect hung {elapsed:?}: {error}"
    );
}

/// An argument over the kernel's limit (E2BIG) is the host's
/// configuration (`is_builder()`: a fleet does not retry it), though it
/// is the watchdog's exec that meets it.
#[tokio::test]
async fn an_argument_too_long_is_a_configuration_error() {
    let _serial = serial().await;
    let huge = "x".repeat(256 * 1024);
    let error = Connector::stdio(StdioCommand::new("/bin/sh").args(["-c", "exit 0", &huge]))
        .connect_timeout(Duration::from_secs(15))
        .connect()
        .await
        .expect_err("E2BIG");
    eprintln!("{error}");
    assert!(error.is_builder(), "retryable: {error}");
}

/// Likewise an argument holding a NUL byte (std refuses it with
/// InvalidInput).
#[tokio::test]
async fn an_argument_with_a_nul_byte_is_a_configuration_error() {
    let _serial = serial().await;
    let error = Connector::stdio(StdioCommand::new("/bin/sh").args([
        OsString::from("-c"),
        OsString::from_vec(b"exit\0 0".to_vec()),
    ]))
    .connect_timeout(Duration::from_secs(15))
    .connect()
    .await
    .expect_err("a NUL byte cannot be passed");
    eprintln!("{error}");
    assert!(error.is_builder(), "retryable: {error}");
}

/// A `setsid` child of a server still alive at the release's SIGTERM
/// step (node's `detached: true`) is adopted by the watchdog only once the
/// server has ended on that SIGTERM: it gets SIGTERM then, and the release
/// says Terminated, not Killed after the grace.
#[tokio::test]
async fn a_setsid_child_of_a_live_server_gets_the_releases_sigterm() {
    let _serial = serial().await;
    let marker = unique("setsid");
    let _sweep = Sweep(marker.clone());
    // The server: ignores stdin's end, takes 300 ms to exit on SIGTERM; its
    // setsid child exits at once on SIGTERM.
    let script = format!(
        "setsid sleep 1000 </dev/null >/dev/null 2>&1 & \
         trap 'sleep 0.3; exit 0' TERM; \
         exec 3<&0; python3 -u {} --era legacy --ignore-eof <&3 3<&- & exec 3<&-; wait; wait",
        server_py()
    );
    let session = Connector::stdio(
        StdioCommand::new("/bin/sh")
            .args(["-c", &script])
            .env(MARKER, &marker)
            .grace(
                Grace::default()
                    .stdin(Duration::from_millis(300))
                    .terminate(Duration::from_secs(4)),
            ),
    )
    .connect_timeout(Duration::from_secs(20))
    .connect()
    .await
    .expect("connect");
    let started = Instant::now();
    let released = session.close().await;
    let elapsed = started.elapsed();
    eprintln!("{:?} after {elapsed:?}", released.process);
    assert!(
        matches!(released.process, Some(ProcessEnd::Terminated)),
        "{:?} after {elapsed:?}",
        released.process
    );
}

/// Holds (the control of the test above): the same server without its
/// setsid child is Terminated.
#[tokio::test]
async fn control_the_same_server_without_a_setsid_child_is_terminated() {
    let _serial = serial().await;
    let marker = unique("nosetsid");
    let _sweep = Sweep(marker.clone());
    let script = format!(
        "trap 'sleep 0.3; exit 0' TERM; \
         exec 3<&0; python3 -u {} --era legacy --ignore-eof <&3 3<&- & exec 3<&-; wait; wait",
        server_py()
    );
    let session = Connector::stdio(
        StdioCommand::new("/bin/sh")
            .args(["-c", &script])
            .env(MARKER, &marker)
            .grace(
                Grace::default()
                    .stdin(Duration::from_millis(300))
                    .terminate(Duration::from_secs(4)),
            ),
    )
    .connect_timeout(Duration::from_secs(20))
    .connect()
    .await
    .expect("connect");
    let released = session.close().await;
    assert!(
        matches!(released.process, Some(ProcessEnd::Terminated)),
        "{:?}",
        released.process
    );
}

/// Holds: the server (and the watchdog, beyond its own) holds only 0, 1
/// and 2: read from the host in /proc/<server>/fd.
#[tokio::test]
async fn the_server_holds_only_its_three_streams() {
    let _serial = serial().await;
    let marker = unique("fds");
    let _sweep = Sweep(marker.clone());
    let session = Connector::stdio(fixture(&marker, &["--era", "legacy"]))
        .connect_timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect("connect");
    let mut seen = Vec::new();
    for pid in marked(&marker) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|dir| {
                dir.filter_map(|e| {
                    let e = e.ok()?;
                    let target = std::fs::read_link(e.path()).ok()?;
                    Some(format!(
                        "{}->{}",
                        e.file_name().to_string_lossy(),
                        target.display()
                    ))
                })
                .collect()
            })
            .unwrap_or_default();
        seen.push((String::from_utf8_lossy(&cmdline).replace('\0', " "), fds));
    }
    session.close().await;
    eprintln!("{seen:#?}");
    let server = seen
        .iter()
        .find(|(cmd, _)| cmd.contains("stdio_server.py") && !cmd.starts_with("mcp-watchdog"))
        .expect("the server");
    let mut numbers: Vec<u32> = server
        .1
        .iter()
        .filter(|fd| !fd.contains("anon_inode:[eventpoll]") && !fd.contains("/dev/urandom"))
        .map(|fd| fd.split("->").next().unwrap().parse().unwrap())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [0, 1, 2], "{seen:#?}");
}

/// Holds: no descriptor of the host grows over spawn + release cycles
/// (closed and dropped), from a multi-thread runtime, concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_spawns_leak_no_descriptor_and_no_process() {
    let _serial = serial().await;
    let marker = unique("many");
    let _sweep = Sweep(marker.clone());
    // The image is found once: warm it.
    let warm = Connector::stdio(fixture(&marker, &["--era", "legacy"]))
        .connect()
        .await
        .expect("connect");
    warm.close().await;
    let before = open_fds();
    for round in 0..3 {
        let mut tasks = Vec::new();
        for i in 0..8 {
            let marker = marker.clone();
            tasks.push(tokio::spawn(async move {
                let session = Connector::stdio(fixture(&marker, &["--era", "legacy"]))
                    .connect_timeout(Duration::from_secs(60))
                    .connect()
                    .await
                    .expect("connect");
                if (i + round) % 2 == 0 {
                    session.close().await;
                } else {
                    drop(session);
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
    }
    mcp_scoped_http::shutdown().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = marked(&marker);
        let fds = open_fds();
        if left.is_empty() && fds <= before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left: {left:?}; descriptors {before} -> {fds}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Holds: a connect dropped right after the watchdog starts (polled only
/// a few times) leaves no process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_dropped_early_many_times_leaves_nothing() {
    let _serial = serial().await;
    let marker = unique("dropped");
    let _sweep = Sweep(marker.clone());
    for micros in [0u64, 50, 200, 500, 1000, 2000, 5000, 20000] {
        let connect = Connector::stdio(fixture(&marker, &["--era", "legacy"]))
            .connect_timeout(Duration::from_secs(20))
            .connect();
        let _ = tokio::time::timeout(Duration::from_micros(micros), connect).await;
    }
    mcp_scoped_http::shutdown().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = marked(&marker);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[allow(dead_code)]
fn unused(_: &Path) {}

/// The role a re-run of this binary plays (see `rerun`), and its marker.
const ROLE: &str = "MCP_ATTACK_ROLE";

/// Re-runs this test binary as `helper` with ROLE=role, through `wrap`
/// (a shell snippet that ends with `exec "$0" "$@"`); returns its output.
async fn rerun(wrap: &str, helper: &str, role: &str, marker: &str) -> String {
    let me = std::env::current_exe().expect("current exe");
    let output = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new("sh")
            .arg("-c")
            .arg(wrap)
            .arg(me)
            .args([
                "--exact",
                crate::support::this_test(module_path!(), helper).as_str(),
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(ROLE, role)
            .env(MARKER, marker)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the helper ends in time")
    .expect("the helper ran");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "helper failed: {text}");
    text
}

/// Polls (bounded) until nothing carries `marker`; panics with survivors.
async fn assert_gone(marker: &str, within: Duration) {
    assert_gone_except(marker, "\0", within).await;
}

/// Polls (bounded) until nothing carries `marker` but processes whose
/// command line starts with `spared`; panics with survivors.
async fn assert_gone_except(marker: &str, spared: &str, within: Duration) {
    let spared_by = |pid: &i32| {
        // The command line's arguments are NUL-separated.
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmd| {
            String::from_utf8_lossy(&cmd)
                .replace('\0', " ")
                .starts_with(spared)
        })
    };
    let deadline = Instant::now() + within;
    loop {
        let left: Vec<i32> = marked(marker)
            .into_iter()
            .filter(|pid| !spared_by(pid))
            .collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            let described: Vec<String> = left
                .iter()
                .map(|pid| {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    format!(
                        "{pid}: {}",
                        String::from_utf8_lossy(&cmd).replace('\0', " ")
                    )
                })
                .collect();
            panic!("left after {within:?}: {described:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The helper of the re-run tests: connects to the fixture with daemons,
/// closes, prints the release, ends.
#[tokio::test]
#[ignore = "a helper, run by the tests that re-run this binary"]
async fn helper_daemons_then_close() {
    let _shared = crate::support::shared();
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let marker = std::env::var(MARKER).expect("marker");
    if role == "sigchld-ignored" {
        // SAFETY: setting a disposition; before any spawn of this process.
        unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    }
    let session = Connector::stdio(
        fixture(&marker, &["--era", "legacy", "--daemons"]).grace(
            Grace::default()
                .stdin(Duration::from_millis(200))
                .terminate(Duration::from_millis(500)),
        ),
    )
    .connect_timeout(Duration::from_secs(30))
    .connect()
    .await
    .expect("connect");
    let released = session.close().await;
    println!("\nreleased: {:?}", released.process);
}

/// /proc absent (a sandbox or chroot without it): the image falls back to
/// the file under $TMPDIR and the server runs; the watchdog cannot list
/// the orphans it adopted, so at the release it kills the server and its
/// group, waits a bounded while for the rest, and ends: the release
/// returns, the watchdog and the server's group are gone, and the daemons
/// (`sleep 1001`, `sleep 1002`) are left, as the guide's known gaps say.
#[tokio::test]
async fn without_proc_the_daemons_still_end_with_the_release() {
    let _serial = serial().await;
    let marker = unique("noproc");
    let _sweep = Sweep(marker.clone());
    let text = rerun(
        r#"exec unshare -m --propagation private sh -c 'umount -l /proc && exec "$0" "$@"' "$0" "$@""#,
        "helper_daemons_then_close",
        "noproc",
        &marker,
    )
    .await;
    eprintln!("{text}");
    assert!(text.contains("released: "), "{text}");
    // The watchdog's bounded wait is 5 s.
    assert_gone_except(&marker, "sleep 100", Duration::from_secs(15)).await;
}

/// A host that ignores SIGCHLD: connect and close work and leave nothing.
#[tokio::test]
async fn a_host_ignoring_sigchld_leaves_nothing() {
    let _serial = serial().await;
    let marker = unique("sigign");
    let _sweep = Sweep(marker.clone());
    let text = rerun(
        r#"exec "$0" "$@""#,
        "helper_daemons_then_close",
        "sigchld-ignored",
        &marker,
    )
    .await;
    eprintln!("{text}");
    assert!(text.contains("released: "), "{text}");
    assert_gone(&marker, Duration::from_secs(10)).await;
}

/// The zombie children of this process.
fn zombie_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let mut fields = after.split_whitespace();
            let state = fields.next();
            let parent: Option<i32> = fields.next().and_then(|p| p.parse().ok());
            state == Some("Z") && parent == Some(me)
        })
        .collect()
}

/// Holds: spawns dropped (not closed) and failed spawns leave no zombie
/// of this process once the reaper is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_and_failed_spawns_leave_no_zombie() {
    let _serial = serial().await;
    let marker = unique("zombies");
    let _sweep = Sweep(marker.clone());
    for _ in 0..6 {
        let session = Connector::stdio(fixture(&marker, &["--era", "legacy"]))
            .connect()
            .await
            .expect("connect");
        drop(session);
        let _ = Connector::stdio(StdioCommand::new("/nonexistent-attack/prog"))
            .connect()
            .await;
    }
    mcp_scoped_http::shutdown().await;
    assert_gone(&marker, Duration::from_secs(15)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let zombies = zombie_children();
        if zombies.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "zombies: {zombies:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The helper of the mid-start SIGKILL test: connects, and waits.
#[tokio::test]
#[ignore = "a helper, run by a_host_killed_mid_start_leaves_nothing"]
async fn helper_connect_and_wait() {
    let _shared = crate::support::shared();
    let Ok(_role) = std::env::var(ROLE) else {
        return;
    };
    let marker = std::env::var(MARKER).expect("marker");
    let session = Connector::stdio(fixture(&marker, &["--era", "legacy", "--daemons"]))
        .connect_timeout(Duration::from_secs(30))
        .connect()
        .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    drop(session);
}

/// Holds: the host killed with SIGKILL at points of the start (as soon as
/// its child exists, and a little after) leaves nothing of the tree.
#[tokio::test]
async fn a_host_killed_mid_start_leaves_nothing() {
    let _serial = serial().await;
    let me = std::env::current_exe().expect("current exe");
    for delay_us in [0u64, 300, 1000, 3000, 10000, 60000] {
        let marker = unique("midstart");
        let _sweep = Sweep(marker.clone());
        let mut host = tokio::process::Command::new(&me)
            .args([
                "--exact",
                crate::support::this_test(module_path!(), "helper_connect_and_wait").as_str(),
                "--ignored",
                "--nocapture",
            ])
            .env(ROLE, "midstart")
            .env(MARKER, &marker)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the helper");
        let pid = host.id().expect("pid");
        // Until the helper has a child (its watchdog's spawn), bounded.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
            let any = tasks.filter_map(Result::ok).any(|task| {
                std::fs::read_to_string(task.path().join("children"))
                    .is_ok_and(|children| !children.trim().is_empty())
            });
            if any {
                break;
            }
            assert!(Instant::now() < deadline, "the helper never spawned");
            std::thread::yield_now();
        }
        if delay_us > 0 {
            std::thread::sleep(Duration::from_micros(delay_us));
        }
        host.start_kill().expect("SIGKILL");
        host.wait().await.expect("reaped");
        assert_gone(&marker, Duration::from_secs(10)).await;
    }
}

/// A connect to the fixture in a 2025 era, marked, within 30 s.
async fn connect_legacy(marker: &str) -> mcp_scoped_http::Result<mcp_scoped_http::Session> {
    Connector::stdio(fixture(marker, &["--era", "legacy"]))
        .connect_timeout(Duration::from_secs(30))
        .connect()
        .await
}

/// Connects again and prints how it went (the re-run test reads it).
async fn second_connect(marker: &str) {
    match connect_legacy(marker).await {
        Ok(session) => {
            session.close().await;
            println!("second connect: ok");
        }
        Err(error) => println!(
            "second connect: {error} (retryable: {})",
            !error.is_builder()
        ),
    }
}

/// The helper of the image test: connects and closes, removes the image's
/// directory (as a temporary-file cleaner does to an idle file: macOS
/// purges `$TMPDIR` files unused for 3 days, systemd-tmpfiles `/tmp` ones
/// after 10), and connects again.
#[tokio::test]
#[ignore = "a helper, run by a_watchdog_image_removed_from_tmpdir_is_written_again"]
async fn helper_image_removed() {
    let _shared = crate::support::shared();
    let Ok(_role) = std::env::var(ROLE) else {
        return;
    };
    let marker = std::env::var(MARKER).expect("marker");
    connect_legacy(&marker)
        .await
        .expect("the first connect")
        .close()
        .await;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("mcp-scoped-http-{uid}"));
    assert!(dir.is_dir(), "the image's directory {dir:?}");
    std::fs::remove_dir_all(&dir).expect("removed");
    println!();
    second_connect(&marker).await;
}

/// Where the watchdog runs from the file under $TMPDIR (macOS and the
/// BSDs always; Linux without a usable memfd or /proc), a file a cleaner
/// removed is written again at the next spawn.
#[tokio::test]
async fn a_watchdog_image_removed_from_tmpdir_is_written_again() {
    let _serial = serial().await;
    let marker = unique("image");
    let _sweep = Sweep(marker.clone());
    let tmp = temp_dir("tmpdir");
    let wrap = format!(
        r#"export TMPDIR={}; exec unshare -m --propagation private sh -c 'umount -l /proc && exec "$0" "$@"' "$0" "$@""#,
        tmp.display()
    );
    let text = rerun(&wrap, "helper_image_removed", "image", &marker).await;
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("{text}");
    assert!(text.contains("second connect: ok"), "{text}");
}

/// The helper of the EMFILE test: the first spawn of the process meets a
/// full descriptor table; the table is freed; a spawn again.
#[tokio::test]
#[ignore = "a helper, run by a_first_spawn_out_of_descriptors_does_not_disable_stdio_for_good"]
async fn helper_first_spawn_emfile() {
    let _shared = crate::support::shared();
    let Ok(_role) = std::env::var(ROLE) else {
        return;
    };
    let marker = std::env::var(MARKER).expect("marker");
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills a valid struct.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    let saved = limit;
    // Highest open descriptor + 1: no room for one more.
    let highest = std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap_or(2);
    limit.rlim_cur = highest + 16;
    // SAFETY: setrlimit with a valid struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    // Every slot taken.
    let mut filler = Vec::new();
    loop {
        // SAFETY: dup of stdin; the copies are closed below.
        let fd = unsafe { libc::dup(0) };
        if fd < 0 {
            break;
        }
        filler.push(fd);
    }
    let first = connect_legacy(&marker).await;
    for fd in filler {
        // SAFETY: our own copies.
        unsafe { libc::close(fd) };
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &saved) }, 0);
    println!(
        "\nfirst connect: {:?}",
        first.as_ref().err().map(ToString::to_string)
    );
    drop(first);
    second_connect(&marker).await;
}

/// A first spawn that meets a transient shortage (no descriptor left)
/// does not disable stdio servers for the host's life: the next spawn
/// finds the image.
#[tokio::test]
async fn a_first_spawn_out_of_descriptors_does_not_disable_stdio_for_good() {
    let _serial = serial().await;
    let marker = unique("emfile");
    let _sweep = Sweep(marker.clone());
    let text = rerun(
        r#"exec "$0" "$@""#,
        "helper_first_spawn_emfile",
        "emfile",
        &marker,
    )
    .await;
    eprintln!("{text}");
    assert!(text.contains("second connect: ok"), "{text}");
}

/// A watchdog killed from outside: the server dies of its parent-death
/// signal and the host SIGKILLs its group; what left the group (the two
/// daemons, adopted or not yet) escapes, as the guide says.
#[tokio::test]
async fn a_watchdog_killed_from_outside_takes_the_servers_group_with_it() {
    let _serial = serial().await;
    let marker = unique("wdkill");
    let _sweep = Sweep(marker.clone());
    let session = Connector::stdio(fixture(&marker, &["--era", "legacy", "--daemons"]))
        .connect_timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect("connect");
    let cmdline = |pid: i32| {
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
            .replace('\0', " ")
    };
    // Until both daemons run (bounded).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(marked(&marker)
        .iter()
        .any(|&p| cmdline(p).starts_with("sleep 1001"))
        && marked(&marker)
            .iter()
            .any(|&p| cmdline(p).starts_with("sleep 1002")))
    {
        assert!(Instant::now() < deadline, "no daemons");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let watchdog = marked(&marker)
        .into_iter()
        .find(|&p| {
            u32::try_from(p)
                .ok()
                .and_then(crate::support::processes::stat)
                .is_some_and(|stat| stat.comm == crate::support::processes::WATCHDOG)
        })
        .expect("the watchdog");
    // SAFETY: a signal to this test's watchdog.
    assert_eq!(unsafe { libc::kill(watchdog, libc::SIGKILL) }, 0);
    let released = session.close().await;
    eprintln!("{:?}", released.process);
    // Allowed to escape, per the guide: what left the group.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = marked(&marker)
            .into_iter()
            .map(cmdline)
            .filter(|c| !c.starts_with("sleep 100"))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "escaped besides the daemons: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Holds: non-UTF-8 bytes in an argument, an environment value and the
/// working directory reach the server unchanged.
#[tokio::test]
async fn non_utf8_argv_env_and_cwd_reach_the_server_unchanged() {
    use std::os::unix::ffi::OsStrExt as _;
    let _serial = serial().await;
    let marker = unique("bytes");
    let _sweep = Sweep(marker.clone());
    let base = temp_dir("bytes");
    let cwd = base.join(std::ffi::OsStr::from_bytes(b"d\xffir"));
    std::fs::create_dir(&cwd).expect("cwd");
    let out = base.join("out");
    let script = format!(
        "printf '%s|%s|%s' \"$1\" \"$V\" \"$(pwd)\" > {}; exec python3 -u {} --era legacy",
        out.display(),
        server_py()
    );
    let session = Connector::stdio(
        StdioCommand::new("/bin/sh")
            .arg("-c")
            .arg(&script)
            .arg("sh")
            .arg(OsString::from_vec(b"a\xffb\xc3".to_vec()))
            .env("V", OsString::from_vec(b"v\xfe".to_vec()))
            .env(MARKER, &marker)
            .current_dir(&cwd),
    )
    .connect_timeout(Duration::from_secs(20))
    .connect()
    .await
    .expect("connect");
    let seen = std::fs::read(&out).expect("out");
    session.close().await;
    let _ = std::fs::remove_dir_all(&base);
    let mut wanted = b"a\xffb\xc3|v\xfe|".to_vec();
    wanted.extend_from_slice(cwd.as_os_str().as_bytes());
    assert_eq!(seen, wanted, "{}", String::from_utf8_lossy(&seen));
}
