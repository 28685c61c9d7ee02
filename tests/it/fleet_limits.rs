//! The fleet's own bounds (issue 26, items 5 and 6): a flapping server
//! backs off to the cap, connects run a bounded number at once, and a set
//! larger than the fleet's maximum is refused whole.
//!
//! The servers here are scripted (`support/hostile_http.rs`): each counts
//! what the test kit server cannot (connects in flight, pings per session).
//! Every test ends with the baseline check of the world's (idle) test kit
//! server: the fleet left nothing behind.

use crate::support::hostile_http;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::baseline::World;
use crate::support::fleet::{MS, SETTLE, finish, is};
use crate::support::{ServerConfig, eventually, scenario};
use hostile_http::{Seen, Server, State, empty, json_response, result};
use http::Method;
use mcp_scoped_http::Backoff;
use mcp_scoped_http::ProtocolVersion;
use mcp_scoped_http::fleet::{Fleet, FleetEvent, ServerSpec, SlotState};
use serde_json::json;

/// What a scripted server does with its sessions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Script {
    /// Answers everything.
    Healthy,
    /// Each session answers its first `ping`, then 500 to everything: a
    /// server that comes up, says hello, and falls over, every time.
    Flapping,
}

/// What a scripted server counted.
#[derive(Default)]
struct Counts {
    /// `initialize` requests being answered now, and the most at once.
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    /// Pings per session id.
    pings: Mutex<HashMap<String, usize>>,
    /// While set, `initialize` is never answered (until the client goes
    /// away or the server stops).
    hang: std::sync::atomic::AtomicBool,
}

/// A 2025-11-25 server with no lists: `initialize` (held `hold` before its
/// answer, minting `s-N`), `notifications/initialized`, `ping`, DELETE.
fn scripted(script: Script, hold: Duration) -> (Server, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let shared = counts.clone();
    let server = Server::start(move |seen: Seen, state: Arc<State>| {
        let counts = shared.clone();
        async move {
            match (&seen.method, seen.rpc()) {
                (&Method::POST, Some("initialize")) => {
                    let now = counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    counts.most_in_flight.fetch_max(now, Ordering::SeqCst);
                    // Decremented however this ends (a hang is dropped with
                    // the server's runtime).
                    struct Leave(Arc<Counts>);
                    impl Drop for Leave {
                        fn drop(&mut self) {
                            self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                    let _leave = Leave(counts.clone());
                    if counts.hang.load(Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                    tokio::time::sleep(hold).await;
                    let n = state.count.fetch_add(1, Ordering::SeqCst);
                    let mut response = json_response(
                        200,
                        &result(
                            &seen.id(),
                            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                                   "serverInfo": {"name": "scripted", "version": "1"}}),
                        ),
                    );
                    response
                        .headers_mut()
                        .insert("mcp-session-id", format!("s-{n}").parse().unwrap());
                    response
                }
                (&Method::POST, Some("notifications/initialized")) => empty(202),
                (&Method::POST, Some("ping")) => {
                    let session = seen.header("mcp-session-id").unwrap_or("").to_owned();
                    let nth = {
                        let mut pings = counts.pings.lock().unwrap();
                        let count = pings.entry(session).or_default();
                        *count += 1;
                        *count
                    };
                    if script == Script::Flapping && nth > 1 {
                        empty(500)
                    } else {
                        json_response(200, &result(&seen.id(), json!({})))
                    }
                }
                (&Method::DELETE, _) => empty(200),
                _ => empty(405),
            }
        }
    });
    (server, counts)
}

fn spec(server: &Server) -> ServerSpec {
    ServerSpec::new(server.url("/mcp"))
        .protocol_version(ProtocolVersion::V2025_11_25)
        .listen(false)
        .connect_timeout(SETTLE)
        .request_timeout(SETTLE)
        .delete_timeout(Duration::from_secs(1))
}

fn attempt(fleet: &Fleet, server: &str) -> u32 {
    fleet
        .state(server)
        .and_then(|state| state.attempt())
        .unwrap_or(0)
}

/// Before: each session's one answered ping reset the attempt count, so
/// the slot came back at the first backoff for ever (measured: 3.45
/// `initialize`/s against a host calling every 50 ms). Now a session must
/// stay up for `stable_after` (60 s by default) before its loss starts the
/// count anew: the count climbs and the delay reaches the cap.
#[test]
fn a_flapping_server_backs_off_to_the_cap() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let (server, counts) = scripted(Script::Flapping, Duration::ZERO);
        let backoff = Backoff::new(2 * MS, 16 * MS);
        let fleet = Fleet::builder()
            .backoff(backoff)
            .health_interval(Some(2 * MS))
            .shutdown_timeout(SETTLE)
            .build();
        let mut events = fleet.events();
        fleet.apply([("flappy", spec(&server))]).await.unwrap();

        // Attempt 5's ceiling (2 ms × 2^4 = 32 ms) is past the cap.
        let climbed = eventually(SETTLE, || attempt(&fleet, "flappy") >= 5).await;
        let sessions = counts.pings.lock().unwrap().len();
        assert!(
            climbed,
            "the attempt count never passed {} over {sessions} sessions: {:?}",
            attempt(&fleet, "flappy"),
            fleet.states()
        );
        assert_eq!(backoff.ceiling(attempt(&fleet, "flappy")), 16 * MS);
        // Every session was proven (its first ping answered) and lost: the
        // count rose by one per session, never back to 1.
        let mut attempts = Vec::new();
        while let Ok(event) = events.try_recv() {
            if let FleetEvent::State {
                state: SlotState::Retrying { attempt, .. },
                ..
            } = event
            {
                attempts.push(attempt);
            }
        }
        assert!(attempts.len() >= 5, "{attempts:?}");
        assert!(
            attempts.windows(2).all(|pair| pair[1] == pair[0] + 1),
            "{attempts:?}"
        );
        assert!(
            counts.pings.lock().unwrap().values().all(|&n| n >= 1),
            "every session answered a ping"
        );
        fleet.shutdown().await;
        drop(server);
        finish(fleet, &world, &[], "flapping").await;
    });
}

/// Before: every slot started at once (20,000 servers: 696 MiB and 5.7 s
/// of CPU in the first 10 s). Now at most `concurrent_connects` connects
/// run at once, each holding its permit until it is ready or has failed,
/// and every slot still comes up, in turn.
#[test]
fn connects_run_at_most_the_bound_at_once() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        // Each `initialize` held 20 ms: the starts overlap unless queued.
        let (server, counts) = scripted(Script::Healthy, 20 * MS);
        let fleet = Fleet::builder()
            .concurrent_connects(3)
            .health_interval(None)
            .shutdown_timeout(SETTLE)
            .build();
        let names: Vec<String> = (0..12).map(|n| format!("s{n:02}")).collect();
        fleet
            .apply(names.iter().map(|name| (name.clone(), spec(&server))))
            .await
            .unwrap();
        let all_ready = eventually(SETTLE, || {
            names.iter().all(|name| is(&fleet, name, "ready"))
        })
        .await;
        assert!(all_ready, "{:?}", fleet.states());
        let most = counts.most_in_flight.load(Ordering::SeqCst);
        assert!(most <= 3, "{most} connects at once, over the bound of 3");
        // The bound is a bound, not a queue of one.
        assert!(most >= 2, "{most} connects at once");
        assert_eq!(server.state.rpcs("initialize"), 12);
        fleet.shutdown().await;
        drop(server);
        finish(fleet, &world, &[], "bounded starts").await;
    });
}

/// One permit: the slot that got it hangs in `initialize`, the other two
/// wait in line. Removing one in line ends it at once (its wait dropped,
/// no permit kept); removing the holder gives the permit back (its hung
/// connect dropped), and the last one connects: had either kept a permit,
/// it never would.
#[test]
fn a_slot_stopped_while_waiting_for_a_permit_ends_at_once_and_frees_it() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let (server, counts) = scripted(Script::Healthy, Duration::ZERO);
        counts.hang.store(true, Ordering::SeqCst);
        let fleet = Fleet::builder()
            .concurrent_connects(1)
            .health_interval(None)
            .shutdown_timeout(SETTLE)
            .build();
        let named = |name: &str| (name.to_owned(), spec(&server).header("x-slot", name));
        fleet.apply(["a", "b", "c"].map(named)).await.unwrap();
        assert!(eventually(SETTLE, || server.state.rpcs("initialize") == 1).await);
        // A bounded look: no second connect starts while the first hangs.
        let more = eventually(100 * MS, || server.state.rpcs("initialize") > 1).await;
        assert!(
            !more,
            "{} connects at once, over the bound of 1",
            server.state.rpcs("initialize")
        );
        let holder = server
            .state
            .seen()
            .iter()
            .find(|seen| seen.rpc() == Some("initialize"))
            .and_then(|seen| seen.header("x-slot").map(str::to_owned))
            .expect("the first connect names its slot");
        let in_line: Vec<&str> = ["a", "b", "c"]
            .into_iter()
            .filter(|name| **name != *holder)
            .collect();
        assert!(in_line.iter().all(|name| is(&fleet, name, "starting")));
        counts.hang.store(false, Ordering::SeqCst);

        // One in line leaves: it ends at once, and the holder keeps the
        // permit (still one connect).
        let report = tokio::time::timeout(
            SETTLE,
            fleet.apply([holder.as_str(), in_line[1]].map(named)),
        )
        .await
        .expect("a slot waiting for a permit ends at once")
        .unwrap();
        assert_eq!(report.stopped, [in_line[0]]);
        assert_eq!(server.state.rpcs("initialize"), 1);

        // The holder leaves: its hung connect is dropped and its permit
        // given back, and the last one comes up.
        let report = tokio::time::timeout(SETTLE, fleet.apply([in_line[1]].map(named)))
            .await
            .expect("a slot connecting ends within its delete timeout")
            .unwrap();
        assert_eq!(report.stopped, [holder.as_str()]);
        assert!(
            eventually(SETTLE, || is(&fleet, in_line[1], "ready")).await,
            "{:?}",
            fleet.states()
        );
        fleet.shutdown().await;
        drop(server);
        finish(fleet, &world, &[], "stopped in line").await;
    });
}

/// Before: any number of servers was accepted (a 751 KiB configuration
/// of 20,000). Now a set of more enabled servers than `max_servers` is
/// refused whole, with a limit error naming the bound, and nothing starts
/// or stops; disabled entries do not count.
#[test]
fn more_servers_than_the_maximum_are_refused_and_nothing_changes() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let (server, _counts) = scripted(Script::Healthy, Duration::ZERO);
        let fleet = Fleet::builder()
            .max_servers(3)
            .health_interval(None)
            .shutdown_timeout(SETTLE)
            .build();
        let named = |n: usize| (format!("s{n}"), spec(&server));

        let error = fleet.apply((0..4).map(named)).await.unwrap_err();
        assert!(error.is_limit(), "{error}");
        let shown = error.to_string();
        assert!(
            shown.contains("4 servers") && shown.contains("3") && shown.contains("max_servers"),
            "{shown}"
        );
        assert!(fleet.states().is_empty(), "{:?}", fleet.states());

        // Three enabled and two disabled: accepted.
        let disabled = (3..5).map(|n| (format!("s{n}"), spec(&server).enabled(false)));
        let report = fleet
            .apply((0..3).map(named).chain(disabled))
            .await
            .unwrap();
        assert_eq!(report.started, ["s0", "s1", "s2"]);
        assert!(
            eventually(SETTLE, || (0..3).all(|n| is(
                &fleet,
                &format!("s{n}"),
                "ready"
            )))
            .await
        );
        let initializes = server.state.rpcs("initialize");

        // A fourth on top: refused, the three running untouched.
        let error = fleet.apply((0..4).map(named)).await.unwrap_err();
        assert!(error.is_limit(), "{error}");
        assert_eq!(fleet.states().len(), 3);
        assert!((0..3).all(|n| is(&fleet, &format!("s{n}"), "ready")));
        assert_eq!(server.state.rpcs("initialize"), initializes);

        // The default: a thousand.
        let default = Fleet::new();
        let error = default
            .apply((0..1001).map(|n| (format!("s{n}"), ServerSpec::new("http://127.0.0.1:9/mcp"))))
            .await
            .unwrap_err();
        assert!(
            error.is_limit() && error.to_string().contains("1000"),
            "{error}"
        );
        assert!(default.states().is_empty());
        default.shutdown().await;

        fleet.shutdown().await;
        drop(server);
        finish(fleet, &world, &[], "maximum").await;
    });
}
