//! Resident memory under hostile SSE streams (F37), with the default limits
//! (8 MiB per SSE event, 8 MiB per JSON body): a server that sends a long
//! `id:` line and then many events that carry it over, one huge frame of
//! tiny events, or a batch of tiny messages near the event limit gets a
//! clear error, and the process's peak resident memory stays under
//! [`PEAK_LIMIT`], bounded by the limits rather than by their product with
//! the number of events.
//!
//! The catalog attacks of issue 20 (`i20_*`) do the same to discovery, with
//! the default memory budget (`MemoryBudget`: 64 MiB, 100 000 entries,
//! cursors of 4 KiB): an 8 MiB `tools/list` page of bare `0`s in each era
//! (2025, 2026-07-28, HTTP+SSE), endless small pages of them, 2026-07-28
//! tools whose text holds a `\u` escape (which the `x-mcp-header` check
//! reads), endless 8 MiB cursors, and endless 8 MiB pages of big tools. The
//! connect is measured, from its first byte to its error (or, for the
//! escaped tools, to the session holding them).
//!
//! Each attack goes through a real session (`Connector::new(url).connect()`)
//! against the test kit, whose `tools/call` (F37) or list pages (i20)
//! answer with the flood. Peak resident memory is the kernel's high-water
//! mark (`VmHWM`), reset before the attack through `/proc/self/clear_refs`;
//! where that is not allowed, a thread samples `VmRSS` while the attack
//! runs.
//!
//! The peak is the whole process's, and memory an earlier attack freed may
//! stay resident (the allocator keeps it), so each attack runs alone in a
//! process of its own: the test re-runs this test binary for just that test
//! (and, inside it, through `scenario`, like every other scenario). Resident
//! memory rather than a counting allocator: it is what the bound promises
//! (the allocator's own keeping included), and a process per attack makes
//! it exact, where a counter would need a global allocator in this binary.
//!
//! A binary of its own, apart from `tests/it`: resident memory is the
//! process's, and this binary holds only these tests, so the bounds are not
//! moved by how much other test code a binary maps.

// The test kit's fixtures, shared with the main test binary (tests/it).
#[path = "../it/support/mod.rs"]
mod support;

use crate::support::hostile_http;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::*;
use bytes::Bytes;
use mcp_scoped_http::Resumption;
use mcp_scoped_http::{Connector, MemoryBudget};
use serde_json::json;

const MIB: usize = 1024 * 1024;
/// The peak resident memory of the whole test process allowed during an
/// attack: the limits (8 MiB) a few times over, the test server in the same
/// process included. Before the fix, each attack below took hundreds of MiB
/// or more.
const PEAK_LIMIT: usize = 64 * MIB;
/// Each attack must end (with an error) within this; it takes well under a
/// second.
const DEADLINE: Duration = Duration::from_secs(30);
/// The default event limit, which the attacks are sized against.
const EVENT_LIMIT: usize = 8 * MIB;
/// What the allocator keeps beyond what a bound adds up (its arenas'
/// fragmentation under concurrent frees).
const ALLOCATOR_SLACK: usize = 4 * MIB;
/// Set in the process that runs one attack: the name of its test.
const CHILD: &str = "MCP_SCOPED_HTTP_MEMORY_ATTACK";
/// What the attack's process prints once the attack has run.
const RAN: &str = "attack ran: ";

/// Runs `attack` in a process of its own: this test binary, run again for
/// the test `test` alone. The attack's figures and failure show in this
/// test's output.
fn isolated(test: &str, attack: impl FnOnce()) {
    if std::env::var(CHILD).as_deref() == Ok(test) {
        attack();
        println!("{RAN}{test}");
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            crate::support::this_test(module_path!(), test).as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, test)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the attack's process");
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    // The attack bounds itself; this bounds a process that would not end.
    let deadline = Instant::now() + 4 * DEADLINE + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the attack's process") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = stdout.join().expect("its output");
    let stderr = stderr.join().expect("its output");
    eprint!("{stderr}");
    let ran = stdout.contains(&format!("{RAN}{test}\n"));
    assert!(
        status.is_some_and(|s| s.success()) && ran,
        "{test}: the attack's process ended {status:?} (ran: {ran})\n{stdout}"
    );
}

/// A field of `/proc/self/status` in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(field: &str) -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: usize = line
        .trim_start_matches(field)
        .trim_start_matches(':')
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Measures the process's peak resident memory from now on.
enum PeakMeter {
    /// The high-water mark was reset to the current resident size.
    HighWaterMark,
    /// Not allowed to reset it: a thread samples the resident size.
    Sampler {
        stop: Arc<AtomicBool>,
        thread: JoinHandle<usize>,
    },
}

impl PeakMeter {
    fn start() -> PeakMeter {
        if std::fs::write("/proc/self/clear_refs", "5").is_ok() && status_bytes("VmHWM").is_some() {
            return PeakMeter::HighWaterMark;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut peak = 0;
                while !stop.load(Ordering::Relaxed) {
                    peak = peak.max(status_bytes("VmRSS").expect("/proc/self/status has VmRSS"));
                    std::thread::sleep(Duration::from_millis(1));
                }
                peak.max(status_bytes("VmRSS").unwrap_or(0))
            }
        });
        PeakMeter::Sampler { stop, thread }
    }

    /// The peak since `start`, in bytes.
    fn peak(self) -> usize {
        match self {
            PeakMeter::HighWaterMark => status_bytes("VmHWM").expect("VmHWM"),
            PeakMeter::Sampler { stop, thread } => {
                stop.store(true, Ordering::Relaxed);
                thread.join().expect("the sampler")
            }
        }
    }
}

/// What the client should make of an attack.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// The stream ends without the response (resumption is off).
    NoResponse,
    /// A limit is hit; the error says this.
    Limit(&'static str),
}

/// Runs one attack: `tools/call` is answered with `flood`; the call must
/// end within [`DEADLINE`] with the expected error, and the peak resident
/// memory meanwhile stay under [`PEAK_LIMIT`].
fn attack(name: &'static str, flood: FaultAction, expect: Expect) {
    scenario(async move {
        let server =
            TestServer::start(ServerConfig::default().with_response_mode(ResponseMode::Sse));
        let session = Connector::new(server.url())
            .listen(false)
            // No GET to resume with a megabyte-long `Last-Event-ID`: the
            // stream's end is the end.
            .resumption(Resumption::default().max_attempts(0))
            .connect()
            .await
            .unwrap();
        // Warm: the connection, the runtime's and the allocator's first use.
        session.call_tool("tool-000", json!({})).await.unwrap();
        server.push_fault(Fault::on_rpc("tools/call", flood).times(1));
        let before = status_bytes("VmRSS").unwrap_or(0);
        let meter = PeakMeter::start();
        let started = Instant::now();
        let outcome =
            tokio::time::timeout(DEADLINE, session.call_tool("tool-000", json!({}))).await;
        let took = started.elapsed();
        let peak = meter.peak();
        eprintln!(
            "{name}: peak resident {:.1} MiB (from {:.1} MiB), {took:?}",
            peak as f64 / MIB as f64,
            before as f64 / MIB as f64,
        );
        let error = match outcome {
            Err(_) => panic!("{name}: no end within {DEADLINE:?}"),
            Ok(Ok(result)) => panic!("{name}: a result from a flood: {result}"),
            Ok(Err(error)) => error,
        };
        match expect {
            Expect::NoResponse => assert!(
                error.is_protocol() && error.to_string().contains("broke off"),
                "{name}: {error}"
            ),
            Expect::Limit(says) => assert!(
                error.is_limit() && error.to_string().contains(says),
                "{name}: {error}"
            ),
        }
        assert!(
            peak < PEAK_LIMIT,
            "{name}: peak resident memory {} MiB, over {} MiB",
            peak / MIB,
            PEAK_LIMIT / MIB
        );
        // The session is still usable after the flood.
        session.call_tool("tool-000", json!({})).await.unwrap();
        session.close().await;
    });
}

/// `id: ` and an id of `len` bytes, then a line end.
fn id_line(len: usize, fill: u8) -> Vec<u8> {
    let mut line = b"id: ".to_vec();
    line.resize(4 + len, fill);
    line.push(b'\n');
    line
}

#[test]
fn f37_a_1_mib_id_then_empty_events_in_16_kib_frames() {
    isolated("f37_a_1_mib_id_then_empty_events_in_16_kib_frames", || {
        // Every `event` block dispatches an event carrying the 1 MiB id.
        let unit = b"event\n\n";
        attack(
            "1 MiB id, then 64 KiB of `event` blocks in 16 KiB frames",
            FaultAction::SseFlood {
                prefix: Bytes::from(id_line(MIB, b'a')),
                unit: Bytes::from_static(unit),
                repeat: 64 * 1024 / unit.len(),
                suffix: Bytes::new(),
                frame: 16 * 1024,
            },
            Expect::NoResponse,
        );
    });
}

#[test]
fn f37_an_id_near_the_event_limit_then_empty_events_in_1_mib_frames() {
    isolated(
        "f37_an_id_near_the_event_limit_then_empty_events_in_1_mib_frames",
        || {
            let unit = b"event\n\n";
            attack(
                "8 MiB id, then 1 MiB of `event` blocks in 1 MiB frames",
                FaultAction::SseFlood {
                    prefix: Bytes::from(id_line(EVENT_LIMIT - 64, b'b')),
                    unit: Bytes::from_static(unit),
                    repeat: MIB / unit.len(),
                    suffix: Bytes::new(),
                    frame: MIB,
                },
                Expect::NoResponse,
            );
        },
    );
}

#[test]
fn f37_one_huge_frame_of_tiny_data_events() {
    isolated("f37_one_huge_frame_of_tiny_data_events", || {
        // Tiny notifications, all in one 2 MiB frame, each carrying a 16 KiB id.
        let unit = b"data:{\"method\":\"n\"}\n\n";
        let repeat = 2 * MIB / unit.len();
        attack(
            "16 KiB id, then 2 MiB of tiny data events in one frame",
            FaultAction::SseFlood {
                prefix: Bytes::from(id_line(16 * 1024, b'c')),
                frame: unit.len() * repeat,
                unit: Bytes::from_static(unit),
                repeat,
                suffix: Bytes::new(),
            },
            Expect::NoResponse,
        );
    });
}

#[test]
fn f37_a_long_id_then_a_batch_of_tiny_messages_near_the_event_limit() {
    isolated(
        "f37_a_long_id_then_a_batch_of_tiny_messages_near_the_event_limit",
        || {
            // One event: a 1 MiB id, and a batch of about 490 000
            // notifications in a `data` line that fills the rest of the
            // 8 MiB event limit (the id counts against it too).
            let unit = br#"{"method":"n"},"#;
            let mut prefix = id_line(MIB, b'd');
            prefix.extend_from_slice(b"data: [");
            let suffix = b"{\"method\":\"n\"}]\n\n";
            attack(
                "1 MiB id, then a 7 MiB batch of tiny messages",
                FaultAction::SseFlood {
                    prefix: Bytes::from(prefix),
                    unit: Bytes::from_static(unit),
                    repeat: (EVENT_LIMIT - MIB - 64) / unit.len(),
                    suffix: Bytes::from_static(suffix),
                    frame: MIB,
                },
                Expect::Limit("a batch of more than 1024 messages"),
            );
        },
    );
}

// ------------------------------------------------------------ the catalog

/// What a connect under a catalog attack should end with.
#[derive(Clone, Copy, Debug)]
enum Connects {
    /// A limit error naming this bound (`MemoryBudget::...`).
    Limit(&'static str),
    /// A session holding at least this many tools.
    Tools(usize),
}

/// A JSON answer to whatever list request it answers: `result` is the
/// result's text, with `{id}` (the request's id) where the caller put it.
fn raw_result(result: &str) -> FaultAction {
    let body = format!(r#"{{"jsonrpc":"2.0","id":{{id}},"result":{result}}}"#);
    raw(200, "application/json", body)
}

/// A server's answer given as it is: `status`, `content_type`, `body`
/// (`{id}` where the request's id goes).
fn raw(status: u16, content_type: &str, body: impl Into<Bytes>) -> FaultAction {
    FaultAction::Raw {
        status,
        content_type: content_type.into(),
        body: body.into(),
    }
}

/// A test server answering every `tools/call` with `raw(200, ...)`.
fn calls_answered_with(content_type: &str, body: String, record: bool) -> TestServer {
    TestServer::start(
        ServerConfig::default()
            .with_fault(Fault::on_rpc("tools/call", raw(200, content_type, body)))
            .with_record_requests(record),
    )
}

/// `{"tools":[0,0,...]}` of about `bytes` bytes, and `tail` after the array.
fn bare_zeros(bytes: usize, tail: &str) -> String {
    let count = bytes / 2;
    let mut text = String::with_capacity(bytes + 64);
    text.push_str(r#"{"tools":["#);
    for i in 0..count {
        text.push_str(if i == 0 { "0" } else { ",0" });
    }
    text.push(']');
    text.push_str(tail);
    text.push('}');
    text
}

/// Runs one catalog attack: a server of `eras` whose list pages are
/// `faults`; the connect must end within [`DEADLINE`] as `expect` says,
/// and the peak resident memory meanwhile (the session held, in the
/// success case) stay under `peak_limit`.
fn catalog_attack(
    name: &'static str,
    eras: Eras,
    faults: Vec<Fault>,
    expect: Connects,
    peak_limit: usize,
) {
    scenario(async move {
        let server = TestServer::start(
            ServerConfig::default()
                .with_eras(eras)
                .with_faults(faults)
                .with_record_requests(false),
        );
        let connector = Connector::new(server.url()).listen(false);
        // Warm: the runtime's, the client's and the allocator's first use,
        // on a connect that lists nothing.
        connector
            .clone()
            .discovery(mcp_scoped_http::Discovery::none())
            .connect()
            .await
            .unwrap()
            .close()
            .await;
        let before = status_bytes("VmRSS").unwrap_or(0);
        let meter = PeakMeter::start();
        let started = Instant::now();
        let outcome = tokio::time::timeout(DEADLINE, connector.connect()).await;
        let took = started.elapsed();
        let peak = meter.peak();
        eprintln!(
            "{name}: peak resident {:.1} MiB (from {:.1} MiB), {took:?}",
            peak as f64 / MIB as f64,
            before as f64 / MIB as f64,
        );
        let outcome = outcome.unwrap_or_else(|_| panic!("{name}: no end within {DEADLINE:?}"));
        match (expect, outcome) {
            (Connects::Limit(says), Err(error)) => assert!(
                error.is_limit() && error.to_string().contains(says),
                "{name}: {error}"
            ),
            (Connects::Tools(n), Ok(session)) => {
                assert!(session.catalog().tools.len() >= n, "{name}");
                session.close().await;
            }
            (expect, Err(error)) => panic!("{name}: expected {expect:?}, got {error}"),
            (expect, Ok(session)) => panic!(
                "{name}: expected {expect:?}, connected with {} tools",
                session.catalog().tools.len()
            ),
        }
        assert!(
            peak < peak_limit,
            "{name}: peak resident memory {} MiB, over {} MiB",
            peak / MIB,
            peak_limit / MIB
        );
    });
}

/// Just under the default body limit, room left for the envelope.
const PAGE: usize = 8 * MIB - 64 * 1024;

/// Issue 20 (1): one `tools/list` page of bare `0`s, in an era.
fn one_page_of_bare_zeros(name: &'static str, eras: Eras) {
    // The test's copy of the page is dropped before the attack.
    let fault = Fault::on_rpc("tools/list", raw_result(&bare_zeros(PAGE, "")));
    catalog_attack(
        name,
        eras,
        vec![fault],
        Connects::Limit("MemoryBudget::max_entries"),
        PEAK_LIMIT,
    );
}

#[test]
fn i20_a_page_of_bare_zeros_2025() {
    isolated("i20_a_page_of_bare_zeros_2025", || {
        one_page_of_bare_zeros("8 MiB page of bare 0s, 2025", Eras::Streamable2025);
    });
}

#[test]
fn i20_a_page_of_bare_zeros_2026() {
    isolated("i20_a_page_of_bare_zeros_2026", || {
        one_page_of_bare_zeros("8 MiB page of bare 0s, 2026-07-28", Eras::Modern);
    });
}

#[test]
fn i20_a_page_of_bare_zeros_http_sse() {
    isolated("i20_a_page_of_bare_zeros_http_sse", || {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"result":{}}}"#,
            bare_zeros(PAGE, "")
        );
        let fault = Fault::on_rpc("tools/list", FaultAction::StreamRaw(Bytes::from(body)));
        catalog_attack(
            "8 MiB page of bare 0s, HTTP+SSE 2024-11-05",
            Eras::HttpSse,
            vec![fault],
            Connects::Limit("MemoryBudget::max_entries"),
            PEAK_LIMIT,
        );
    });
}

/// Issue 20 (1): page after page of bare `0`s, each small (64 KiB, 32 768
/// entries), each with a new cursor: what the pages hold together is
/// bounded, not just each page.
#[test]
fn i20_many_pages_of_bare_zeros() {
    isolated("i20_many_pages_of_bare_zeros", || {
        let page = bare_zeros(64 * 1024, r#","nextCursor":"c-{id}""#);
        catalog_attack(
            "64 KiB pages of bare 0s, endless",
            Eras::Streamable2025,
            vec![Fault::on_rpc("tools/list", raw_result(&page))],
            Connects::Limit("MemoryBudget::max_entries"),
            PEAK_LIMIT,
        );
    });
}

/// About `bytes` of 2026-07-28 tools, each with a `\u` escape (as Python's
/// `json.dumps` writes every non-ASCII character) and a schema of many
/// small values; `tail` after the array.
fn escaped_tools(page: usize, bytes: usize, tail: &str) -> String {
    let zeros = vec!["0"; 1800].join(",");
    let mut text = String::from(r#"{"tools":["#);
    let mut i = 0;
    while text.len() < bytes {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            r#"{{"name":"t-{page}-{i}","description":"caf\u00e9","inputSchema":{{"type":"object","properties":{{"p":{{"type":"integer","examples":[{zeros}]}}}}}}}}"#
        ));
        i += 1;
    }
    text.push(']');
    text.push_str(tail);
    text.push('}');
    text
}

/// Issue 20 (2): two pages of 2026-07-28 tools whose text holds a `\u`
/// escape: the `x-mcp-header` check reads each, and must not keep what it
/// read.
#[test]
fn i20_escaped_tools_2026() {
    isolated("i20_escaped_tools_2026", || {
        let (faults, tools) = {
            let first = escaped_tools(1, 7 * MIB, r#","nextCursor":"c-2""#);
            let second = escaped_tools(2, 7 * MIB, "");
            let tools = first.matches("\"name\"").count() + second.matches("\"name\"").count();
            let faults = vec![
                Fault::on_rpc("tools/list", raw_result(&first)).times(1),
                Fault::on_rpc("tools/list", raw_result(&second)).times(1),
            ];
            (faults, tools)
        };
        catalog_attack(
            "14 MiB of tools with a \\u escape, 2026-07-28",
            Eras::Modern,
            faults,
            Connects::Tools(tools),
            PEAK_LIMIT,
        );
    });
}

/// Suspected in issue 20: each `nextCursor` of about 8 MiB, a new one per
/// page, kept and sent back, up to the page cap.
#[test]
fn i20_huge_cursors() {
    isolated("i20_huge_cursors", || {
        let fault = {
            let cursor = "x".repeat(PAGE);
            let page = format!(r#"{{"tools":[],"nextCursor":"{cursor}-{{id}}"}}"#);
            Fault::on_rpc("tools/list", raw_result(&page))
        };
        catalog_attack(
            "8 MiB cursors, a new one per page",
            Eras::Streamable2025,
            vec![fault],
            Connects::Limit("MemoryBudget::max_cursor_len"),
            PEAK_LIMIT,
        );
    });
}

/// Issue 20: pages of ordinary, named tools, each page near the body
/// limit, each with a new cursor, until the catalog's bytes are spent:
/// what is held is the budget, not the page cap times the body limit
/// (800 MiB before). The peak is the budget (held), [`PEAK_LIMIT`] for the
/// rest (the transport's copies of the last page, the test server's), and
/// two more pages: the peak wanders by about that much between runs (119
/// to 129 MiB measured, the in-process server's copies included).
#[test]
fn i20_pages_of_big_tools_fill_the_budget() {
    isolated("i20_pages_of_big_tools_fill_the_budget", || {
        catalog_attack(
            "8 MiB pages of big tools, endless",
            Eras::Streamable2025,
            vec![pages_of_big_tools()],
            Connects::Limit("MemoryBudget::max_bytes"),
            PEAK_LIMIT + MemoryBudget::default().max_bytes + 2 * PAGE,
        );
    });
}

/// Endless `tools/list` pages of ordinary, named tools (8 KiB descriptions),
/// each near the body limit, each with a new cursor.
fn pages_of_big_tools() -> Fault {
    let description = "d".repeat(8 * 1024);
    let mut page = String::from(r#"{"tools":["#);
    let mut i = 0;
    while page.len() < PAGE - 16 * 1024 {
        if i > 0 {
            page.push(',');
        }
        page.push_str(&format!(
            r#"{{"name":"t-{{id}}-{i}","description":"{description}"}}"#
        ));
        i += 1;
    }
    page.push_str(r#"],"nextCursor":"c-{id}"}"#);
    Fault::on_rpc("tools/list", raw_result(&page))
}

// ------------------------------------------------------------- the fleet

/// Hostile servers in [`i26_a_fleet_of_hostile_servers_shares_one_budget`].
const FLEET_SERVERS: usize = 8;
/// Its fleet's memory budget: small, for a quick test (each slot's first
/// page takes about 8 MiB of it: a few hold one, the others are refused).
const FLEET_BUDGET: usize = 32 * MIB;

/// Issue 26 (2): a fleet of eight servers, each sending endless pages of
/// big tools near the body limit. Each session stopped at its own budget
/// (64 MiB), so eight cost eight budgets: 536 MiB measured. Now they draw
/// from the fleet's ([`FLEET_BUDGET`]), and what they hold together is
/// that; the rest is transient, per slot: the page being sent (the test
/// server is in this process and formats each page anew) and the
/// connection's buffers. A slot the fleet's budget refused tries again
/// after its backoff; the test ends once each was refused at least once.
#[test]
fn i26_a_fleet_of_hostile_servers_shares_one_budget() {
    isolated(
        "i26_a_fleet_of_hostile_servers_shares_one_budget",
        fleet_of_hostile_servers,
    );
}

fn fleet_of_hostile_servers() {
    use mcp_scoped_http::Backoff;
    use mcp_scoped_http::fleet::{Fleet, FleetEvent, ServerSpec};

    scenario(async {
        // One page template, shared by every server.
        let fault = pages_of_big_tools();
        let servers: Vec<TestServer> = (0..FLEET_SERVERS)
            .map(|_| {
                TestServer::start(
                    ServerConfig::default()
                        .with_faults(vec![fault.clone()])
                        .with_record_requests(false),
                )
            })
            .collect();
        drop(fault);
        // Warm: the runtime's, the client's and the allocator's first use.
        Connector::new(servers[0].url())
            .listen(false)
            .discovery(mcp_scoped_http::Discovery::none())
            .connect()
            .await
            .unwrap()
            .close()
            .await;
        let fleet = Fleet::builder()
            .backoff(Backoff::new(
                Duration::from_millis(50),
                Duration::from_millis(500),
            ))
            .health_interval(None)
            .memory(FLEET_BUDGET)
            .build();
        let mut events = fleet.events();
        let before = status_bytes("VmRSS").unwrap_or(0);
        let meter = PeakMeter::start();
        let started = Instant::now();
        fleet
            .apply(
                servers.iter().enumerate().map(|(i, server)| {
                    (format!("s{i}"), ServerSpec::new(server.url()).listen(false))
                }),
            )
            .await
            .unwrap();
        // Until every slot's connect has ended over a budget (at least
        // once: a slot the fleet's budget refused tries again).
        let mut refused = std::collections::BTreeMap::new();
        let ended = hostile_http::eventually(DEADLINE, || {
            while let Ok(event) = events.try_recv() {
                if let FleetEvent::State { server, state, .. } = event {
                    if let Some(error) = state.error().filter(|error| error.is_limit()) {
                        refused.insert(server, error.to_string());
                    }
                }
            }
            refused.len() == FLEET_SERVERS
        })
        .await;
        let took = started.elapsed();
        let peak = meter.peak();
        fleet.shutdown().await;
        eprintln!(
            "{FLEET_SERVERS} hostile servers in a fleet: peak resident {:.1} MiB (from {:.1} MiB), {took:?}",
            peak as f64 / MIB as f64,
            before as f64 / MIB as f64,
        );
        assert!(
            ended,
            "not all over a budget within {DEADLINE:?}: {refused:?}"
        );
        assert!(
            refused
                .values()
                .any(|error| error.contains("FleetBuilder::memory")),
            "{refused:?}"
        );
        // What the sessions hold is the fleet's budget (a body is charged
        // before it is read); beside it, transient, a page per slot, which
        // the in-process server formats anew for each answer. Measured:
        // 37 MiB above the start (78 MiB with a fleet budget of 64 MiB);
        // before, 370 MiB after 30 s and still growing, 536 MiB in the
        // issue.
        let allowed = before + FLEET_BUDGET + FLEET_SERVERS * PAGE;
        assert!(
            peak < allowed,
            "peak resident memory {} MiB, over {} MiB",
            peak / MIB,
            allowed / MIB
        );
    });
}

// ------------------------------------------------------- queued messages

/// Issue 20 (hostile review): server notifications waiting for the caller
/// in [`Session::notifications`](mcp_scoped_http::Session::notifications)
/// were bounded by count (256) only, each kept parsed (a `Value`, ~16x its
/// wire size for an array of `0`s). A caller that has taken the receiver
/// but is busy elsewhere let a server park 10 notifications of 2 MiB each
/// (`params.data = [0,0,...]`, 32 MiB each once parsed) on the GET stream:
/// 322 MiB held. (Such a notification is now refused before it is parsed,
/// over the session's budget: see `i26_notifications_...`; these are of
/// 1 MiB, which the budget lets through to the queue.) What waits is now bounded in bytes
/// (`MemoryBudget::max_queued_bytes`, 16 MiB): later notifications are
/// dropped, and a small one after them still arrives.
#[test]
fn i20_queued_notifications_do_not_hold_memory_without_bound() {
    isolated(
        "i20_queued_notifications_do_not_hold_memory_without_bound",
        queued_notifications,
    );
}

fn queued_notifications() {
    use hostile_http::{Server, empty, json_response, message, result};
    use http::Method;
    use mcp_scoped_http::ProtocolVersion;

    scenario(async {
        let big = {
            let zeros = "0,".repeat(MIB / 2 - 1);
            let text = format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\
                 \"params\":{{\"level\":\"info\",\"data\":[{zeros}0]}}}}"
            );
            // One copy, shared by every send: the server holds 2 MiB.
            Bytes::from(format!("event: message\ndata: {text}\n\n"))
        };
        let server = Server::start(move |seen, state| {
            let big = big.clone();
            async move {
                match (&seen.method, seen.rpc()) {
                    (&Method::POST, Some("initialize")) => {
                        let mut r = json_response(
                            200,
                            &result(
                                &seen.id(),
                                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                                       "serverInfo": {"name": "s25", "version": "1"}}),
                            ),
                        );
                        r.headers_mut()
                            .insert("mcp-session-id", "sess-25".parse().unwrap());
                        r
                    }
                    (&Method::POST, _)
                        if seen.body.as_ref().is_some_and(|b| b.get("id").is_some()) =>
                    {
                        json_response(200, &result(&seen.id(), json!({})))
                    }
                    (&Method::POST, _) => empty(202),
                    (&Method::DELETE, _) => empty(200),
                    (&Method::GET, _) if state.mode() == 0 => {
                        state.mode.store(1, Ordering::SeqCst);
                        let (tx, response) = state.sse();
                        tokio::spawn(async move {
                            for _ in 0..10 {
                                if tx.send(big.clone()).await.is_err() {
                                    return;
                                }
                            }
                            // Then a server request: its answer tells the
                            // test that the client has read all of the above.
                            let ping =
                                json!({"jsonrpc": "2.0", "id": "read-all", "method": "ping"});
                            let _ = tx.send(message(&ping)).await;
                            tx.closed().await;
                        });
                        response
                    }
                    _ => empty(405),
                }
            }
        });
        let session = Connector::new(server.url("/mcp"))
            .protocol_version(ProtocolVersion::V2025_11_25)
            .request_timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connects");
        // The caller takes the receiver but is busy elsewhere for now.
        let mut notifications = session.notifications().expect("the receiver");
        let before = status_bytes("VmRSS").unwrap_or(0);
        let meter = PeakMeter::start();
        let read_all =
            hostile_http::eventually(DEADLINE, || {
                server.state.seen().iter().any(|s| {
                    s.is_response() && s.body.as_ref().is_some_and(|b| b["id"] == "read-all")
                })
            })
            .await;
        let queued = notifications.len();
        let peak = meter.peak();
        eprintln!(
            "10 notifications of 1 MiB: {queued} queued, peak resident {:.1} MiB (from {:.1} MiB)",
            peak as f64 / MIB as f64,
            before as f64 / MIB as f64,
        );
        assert!(read_all, "the client never read the stream to its end");
        assert!(
            peak < PEAK_LIMIT,
            "{queued} queued notifications (10 MiB on the wire): peak resident memory {} MiB, over {} MiB",
            peak / MIB,
            PEAK_LIMIT / MIB
        );
        // What was queued is taken; a small notification still arrives.
        while notifications.try_recv().is_ok() {}
        server.state.broadcast(message(&json!({"jsonrpc": "2.0",
            "method": "notifications/message", "params": {"level": "info", "data": "small"}})));
        let small = tokio::time::timeout(DEADLINE, notifications.recv()).await;
        assert!(
            matches!(&small, Ok(Some(m)) if m.method() == Some("notifications/message")),
            "{small:?}"
        );
        session.close().await;
    });
}

/// How many calls the answer attacks make at once.
const CALLS: usize = 16;

/// Issue 26 (1): answers are charged to the session's budget. `CALLS`
/// `tools/call`s at once, each answered (as `content_type`, `body`) with
/// about 8 MiB of bare `0`s, which parse to 16 times that: every call fails
/// with a limit error naming the budget, and the process's peak stays
/// within the budget (64 MiB) above where it started, plus what each
/// connection holds and two answers' copies (112 MiB in all; measured
/// 47-57 MiB over JSON and 87-102 MiB over SSE). Before the fix: 4 calls,
/// 558 MiB; 16, over 1 GiB.
fn concurrent_answers_attack(name: &'static str, content_type: &str, body: String) {
    scenario(async move {
        let server = calls_answered_with(content_type, body, false);
        let session = Arc::new(
            Connector::new(server.url())
                .listen(false)
                .connect()
                .await
                .unwrap(),
        );
        // Warm: the runtime's, the client's and the allocator's first use.
        session.request("ping", None).await.unwrap();
        let before = status_bytes("VmRSS").unwrap_or(0);
        let meter = PeakMeter::start();
        let started = Instant::now();
        // A hang guard, not a figure: reading and refusing 128 MiB of
        // answers in a debug build takes most of 30 s on 2 loaded cores.
        let outcomes = tokio::time::timeout(4 * DEADLINE, calls_at_once(&session, CALLS))
            .await
            .unwrap_or_else(|_| panic!("{name}: no end within {:?}", 4 * DEADLINE));
        let took = started.elapsed();
        let peak = meter.peak();
        eprintln!(
            "{name}: peak resident {:.1} MiB (from {:.1} MiB), {took:?}",
            peak as f64 / MIB as f64,
            before as f64 / MIB as f64,
        );
        for outcome in outcomes {
            let error = outcome.expect_err("an answer over the budget");
            assert!(
                error.is_limit() && error.to_string().contains("MemoryBudget::max_bytes"),
                "{name}: {error}"
            );
        }
        // What is charged, and what no budget sees: each connection's
        // buffers, at both ends (the server is in this process), measured
        // at about 2 MiB a call, and the allocator's slack.
        let allowed =
            before + MemoryBudget::default().max_bytes + CALLS * 2 * MIB + 2 * EVENT_LIMIT;
        assert!(
            peak < allowed,
            "{name}: peak resident memory {} MiB, over {} MiB",
            peak / MIB,
            allowed / MIB
        );
        // The session works on: the budget is all given back.
        session.request("ping", None).await.unwrap();
        Arc::into_inner(session)
            .expect("the calls are done")
            .close()
            .await;
    });
}

/// An answer of about `bytes` of bare `0`s, `{id}` where its id goes.
fn zeros_answer(bytes: usize) -> String {
    let result = bare_zeros(bytes, "").replacen("tools", "content", 1);
    format!(r#"{{"jsonrpc":"2.0","id":{{id}},"result":{result}}}"#)
}

#[test]
fn i26_concurrent_answers_of_bare_zeros_json() {
    isolated("i26_concurrent_answers_of_bare_zeros_json", || {
        concurrent_answers_attack(
            "16 answers of 8 MiB of 0s at once, JSON",
            "application/json",
            zeros_answer(PAGE),
        );
    });
}

#[test]
fn i26_concurrent_answers_of_bare_zeros_sse() {
    isolated("i26_concurrent_answers_of_bare_zeros_sse", || {
        concurrent_answers_attack(
            "16 answers of 8 MiB of 0s at once, SSE",
            "text/event-stream",
            format!("data: {}\n\n", zeros_answer(PAGE)),
        );
    });
}

/// Issue 26 (12): a notification is charged before it is parsed: one of
/// 8 MiB of bare `0`s ahead of each answer fails the call with a limit
/// error, within the same peak. Before the fix, one took 148 MiB.
#[test]
fn i26_notifications_of_bare_zeros_ahead_of_answers() {
    isolated("i26_notifications_of_bare_zeros_ahead_of_answers", || {
        let params = bare_zeros(PAGE, "").replacen("tools", "data", 1);
        let notification =
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{params}}}"#);
        let answer = r#"{"jsonrpc":"2.0","id":{id},"result":{"content":[]}}"#;
        concurrent_answers_attack(
            "16 answers behind 8 MiB notifications of 0s, SSE",
            "text/event-stream",
            format!("data: {notification}\n\ndata: {answer}\n\n"),
        );
    });
}

/// What the budget allows still comes through: answers that parse to
/// about their size (text), several at once, within the budget together.
#[test]
fn i26_answers_within_the_budget_come_through() {
    scenario(async {
        let text = "x".repeat(4 * MIB);
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"result":{{"content":[{{"type":"text","text":"{text}"}}]}}}}"#
        );
        let server = calls_answered_with("application/json", body, true);
        let session = Arc::new(
            Connector::new(server.url())
                .listen(false)
                .connect()
                .await
                .unwrap(),
        );
        for _ in 0..3 {
            for outcome in calls_at_once(&session, 4).await {
                let result = outcome.expect("an answer the budget holds");
                assert_eq!(
                    result["content"][0]["text"].as_str().map(str::len),
                    Some(4 * MIB)
                );
            }
        }
        Arc::into_inner(session)
            .expect("the calls are done")
            .close()
            .await;
    });
}

/// `n` `tools/call`s at once on `session`, their outcomes.
async fn calls_at_once(
    session: &Arc<mcp_scoped_http::Session>,
    n: usize,
) -> Vec<mcp_scoped_http::Result<serde_json::Value>> {
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..n {
        let session = session.clone();
        calls.spawn(async move { session.call_tool("tool-000", json!({})).await });
    }
    calls.join_all().await
}

/// Issue 26 review: a message written as a JSON array (serde reads a
/// struct from an array too: `[id, method, params, result, error]`) was
/// not counted by the estimate made before the parse (which read objects
/// only, so it charged nothing), and the parse built its fields whole: an
/// answer whose `params` held 256 Ki `0`s, 512 KiB on the wire, built some
/// 16 MiB through a budget of 4 MiB, and the call succeeded. Both forms
/// are now refused over the budget, before either is built.
#[test]
fn i26_review_a_message_written_as_an_array_is_charged_too() {
    scenario(async {
        let zeros = format!("{}0", "0,".repeat(256 * 1024 - 1));
        for (form, body) in [
            (
                "object",
                format!(
                    r#"[{{"jsonrpc":"2.0","id":{{id}},"params":[{zeros}],"result":{{"content":[]}}}}]"#
                ),
            ),
            (
                "array",
                format!(r#"[[{{id}},null,[{zeros}],{{"content":[]}}]]"#),
            ),
            // A field the message ignores, which serde skips without
            // decoding its strings (a lone surrogate), was read by the
            // estimate as a value: it failed and charged nothing.
            (
                "ignored field",
                format!(
                    r#"{{"jsonrpc":"\udc00","id":{{id}},"params":[{zeros}],"result":{{"content":[]}}}}"#
                ),
            ),
        ] {
            let server = calls_answered_with("application/json", body, true);
            let session = Connector::new(server.url())
                .listen(false)
                .discovery(
                    mcp_scoped_http::Discovery::default()
                        .memory(MemoryBudget::default().max_bytes(4 * MIB)),
                )
                .connect()
                .await
                .unwrap();
            let error = session
                .call_tool("tool-000", json!({}))
                .await
                .expect_err("an answer over the budget");
            assert!(
                error.is_limit() && error.to_string().contains("MemoryBudget::max_bytes"),
                "{form}: {error}"
            );
            session.close().await;
        }
    });
}

/// Issue 26 review: a call dropped at any point of reading its answer (the
/// body half read, its messages parsed, its result being built; JSON, SSE,
/// and an SSE event that never ends) gives back all it charged: after 60
/// calls dropped at 0 to 30 ms, the largest answer, which needs most of the
/// budget (16 MiB; an SSE answer of 3 MiB of text holds about 10 MiB while
/// it is read), still comes through, as does every other.
#[test]
fn i26_review_calls_dropped_midway_give_their_charge_back() {
    scenario(async {
        let text = "x".repeat(3 * MIB);
        let answer = format!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"result":{{"content":[{{"type":"text","text":"{text}"}}]}}}}"#
        );
        let endless = FaultAction::SseFlood {
            prefix: Bytes::from_static(
                br#"data: {"jsonrpc":"2.0","id":0,"result":{"content":[{"type":"text","text":""#,
            ),
            unit: Bytes::from("x".repeat(4096)),
            repeat: 1024,
            suffix: Bytes::from_static(b"\"}]}}\n\n"),
            frame: 4096,
        };
        let server = TestServer::start(
            ServerConfig::default()
                .with_fault(
                    Fault::on_rpc("tools/call", raw(200, "application/json", answer.clone()))
                        .name("json"),
                )
                .with_fault(
                    Fault::on_rpc(
                        "tools/call",
                        raw(200, "text/event-stream", format!("data: {answer}\n\n")),
                    )
                    .name("sse"),
                )
                .with_fault(Fault::on_rpc("tools/call", endless).name("endless"))
                .with_record_requests(false),
        );
        let session = Connector::new(server.url())
            .listen(false)
            .discovery(
                mcp_scoped_http::Discovery::default()
                    .memory(MemoryBudget::default().max_bytes(16 * MIB)),
            )
            .connect()
            .await
            .unwrap();
        let tools = ["json", "sse", "endless"];
        for round in 0..60u64 {
            let tool = tools[round as usize % tools.len()];
            let call = session.call_tool(tool, json!({}));
            // Dropped wherever it is after this long (or done, if quicker).
            let _ = tokio::time::timeout(Duration::from_micros(round * 500), call).await;
        }
        for tool in ["sse", "json", "sse"] {
            let result = tokio::time::timeout(DEADLINE, session.call_tool(tool, json!({})))
                .await
                .expect("an answer within the deadline")
                .unwrap_or_else(|e| panic!("{tool} after the dropped calls: {e}"));
            assert_eq!(
                result["content"][0]["text"].as_str().map(str::len),
                Some(3 * MIB)
            );
        }
        session.close().await;
    });
}

/// Issue 26 review: an error status's JSON body (at most
/// `TransportConfig::max_error_body`, 64 KiB) was parsed uncharged, its
/// `error.data` building some 32 times its text per request. It is now
/// charged as an answer is: over the budget, the status error comes back
/// without the body's JSON-RPC error, nothing of it is built, and the
/// budget is all given back (a later error body within it is read whole).
#[test]
fn i26_review_an_error_body_is_charged_too() {
    scenario(async {
        let zeros = format!("{}0", "0,".repeat(30 * 1024 - 1));
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"error":{{"code":-32000,"message":"no","data":[{zeros}]}}}}"#
        );
        let server = TestServer::start(ServerConfig::default().with_fault(Fault::on_rpc(
            "tools/call",
            raw(500, "application/json", body),
        )));
        for (budget, parsed) in [(256 * 1024, false), (4 * MIB, true)] {
            let session = Connector::new(server.url())
                .listen(false)
                .discovery(
                    mcp_scoped_http::Discovery::default()
                        .memory(MemoryBudget::default().max_bytes(budget)),
                )
                .connect()
                .await
                .unwrap();
            for _ in 0..3 {
                let error = session
                    .call_tool("tool-000", json!({}))
                    .await
                    .expect_err("an error status");
                assert_eq!(error.status().map(|s| s.as_u16()), Some(500), "{error}");
                assert_eq!(
                    error.rpc_code().is_some(),
                    parsed,
                    "a budget of {budget} bytes: {error}"
                );
            }
            session.close().await;
        }
    });
}

/// Issue 26 (1), the rmcp adapter: `CALLS` `tools/call`s at once through
/// `ScopedTransport`, each answered with about 8 MiB of bare `0`s (which
/// parse to 16 times that): each call ends (with an error: rmcp cannot
/// read such a result, or the budget refuses it) and the peak stays
/// within the same bound as a `Session`'s.
#[cfg(feature = "rmcp")]
fn rmcp_answers_attack(name: &'static str, content_type: &str, body: String) {
    use mcp_scoped_http::adapters::ScopedTransport;
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    scenario(async move {
        let server = calls_answered_with(content_type, body, false);
        let mut transport = ScopedTransport::builder(server.url())
            .listen(false)
            .build()
            .unwrap();
        let report = transport.release_report();
        let client = ().serve(transport).await.expect("rmcp initializes");
        // Warm: the runtime's, the client's and the allocator's first use.
        client.peer().list_tools(None).await.unwrap();
        let before = status_bytes("VmRSS").unwrap_or(0);
        let meter = PeakMeter::start();
        let started = Instant::now();
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..CALLS {
            let peer = client.peer().clone();
            calls.spawn(async move {
                peer.call_tool(CallToolRequestParams::new("tool-000"))
                    .await
                    .map(drop)
            });
        }
        // rmcp's calls are tasks, so this bound fires while they run (a
        // `Session`'s calls end in the poll that reads them): four times
        // the deadline, for a debug build on a loaded machine (measured:
        // 38-41 s there, both for this and for a `Session`).
        let outcomes = tokio::time::timeout(4 * DEADLINE, calls.join_all()).await;
        let took = started.elapsed();
        let peak = meter.peak();
        eprintln!(
            "{name}: peak resident {:.1} MiB (from {:.1} MiB), {took:?}; first outcome: {:?}",
            peak as f64 / MIB as f64,
            before as f64 / MIB as f64,
            outcomes.as_ref().map(|o| &o[0]),
        );
        let outcomes =
            outcomes.unwrap_or_else(|_| panic!("{name}: no end within {:?}", 4 * DEADLINE));
        assert!(
            outcomes.iter().all(Result::is_err),
            "{name}: a result from a flood"
        );
        // Plus the allocator's slack: a CI run with fuzzing and a release
        // build beside it peaked 1.3 MiB over the sum alone, once in five.
        let allowed = before
            + MemoryBudget::default().max_bytes
            + CALLS * 2 * MIB
            + 2 * EVENT_LIMIT
            + ALLOCATOR_SLACK;
        assert!(
            peak < allowed,
            "{name}: peak resident memory {} MiB, over {} MiB",
            peak / MIB,
            allowed / MIB
        );
        // The transport works on: the budget is all given back.
        client.peer().list_tools(None).await.unwrap();
        client.cancel().await.unwrap();
        drop(report);
    });
}

#[cfg(feature = "rmcp")]
#[test]
fn i26_rmcp_concurrent_answers_of_bare_zeros_json() {
    isolated("i26_rmcp_concurrent_answers_of_bare_zeros_json", || {
        rmcp_answers_attack(
            "rmcp: 16 answers of 8 MiB of 0s at once, JSON",
            "application/json",
            zeros_answer(PAGE),
        );
    });
}

#[cfg(feature = "rmcp")]
#[test]
fn i26_rmcp_concurrent_answers_of_bare_zeros_sse() {
    isolated("i26_rmcp_concurrent_answers_of_bare_zeros_sse", || {
        rmcp_answers_attack(
            "rmcp: 16 answers of 8 MiB of 0s at once, SSE",
            "text/event-stream",
            format!("data: {}\n\n", zeros_answer(PAGE)),
        );
    });
}
