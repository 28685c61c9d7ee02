//! A long mixed run: 3000 tool calls from 16 concurrent tasks on two owned
//! sessions (one on its own client, one on a borrowed client), with faults
//! injected at random (500, an SSE answer cut for resumption, delays,
//! hangs cut off by the per-request timeout, session expiry). Every request
//! resolves, each success is its own request's, and nothing leaks.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use mcp_scoped_http::Connector;
use mcp_scoped_http::{RequestOptions, Resumption};
use serde_json::json;

const REQUESTS: usize = 3000;
const TASKS: usize = 16;
const PER_REQUEST: Duration = Duration::from_millis(200);
/// The whole run, far below the test harness's patience.
const WHOLE_RUN: Duration = Duration::from_secs(40);

/// xorshift64*: deterministic, good enough to pick faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug)]
enum Outcome {
    Ok,
    Err(String),
}

#[test]
fn a_long_mixed_run_resolves_every_request_and_leaks_nothing() {
    scenario(async {
        let (server, caller, baseline) = support::baseline::scene(TestServer::start(
            ServerConfig::default().with_listen(ListenMode::Open),
        ))
        .await;
        let ledger_before = mcp_scoped_http::ledger();

        let resumption = Resumption::default()
            .max_attempts(3)
            .first_backoff(Duration::from_millis(5));
        let owned = Connector::new(server.url())
            .bearer("soak-owned")
            .resumption(resumption)
            .connect()
            .await
            .unwrap();
        let borrowed = Connector::new(server.url())
            .bearer("soak-borrowed")
            .client(caller.client.clone())
            .resumption(resumption)
            .connect()
            .await
            .unwrap();
        let sessions = [Arc::new(owned), Arc::new(borrowed)];

        let next = Arc::new(AtomicUsize::new(0));
        let outcomes: Arc<Mutex<Vec<Option<Outcome>>>> =
            Arc::new(Mutex::new((0..REQUESTS).map(|_| None).collect()));
        let faults = Arc::new(Mutex::new([0usize; 5]));
        let server = Arc::new(server);
        let started = Instant::now();

        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let session = sessions[t % 2].clone();
                let (next, outcomes, faults, server) = (
                    next.clone(),
                    outcomes.clone(),
                    faults.clone(),
                    server.clone(),
                );
                tokio::spawn(async move {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t as u64 + 1) * 0x1234_5678));
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= REQUESTS {
                            return;
                        }
                        // Faults go on the next tools/call, whoever sends it.
                        let roll = rng.below(1000);
                        let fault = match roll {
                            0..40 => Some((0, FaultAction::status(500))),
                            40..80 => {
                                Some((1, FaultAction::SseCutAfterEvent { retry_ms: Some(5) }))
                            }
                            80..130 => Some((
                                2,
                                FaultAction::Delay(Duration::from_millis(1 + rng.below(30))),
                            )),
                            130..145 => Some((3, FaultAction::Hang)),
                            _ => None,
                        };
                        if let Some((kind, action)) = fault {
                            server.push_fault(Fault::on_rpc("tools/call", action).times(1));
                            faults.lock().unwrap()[kind] += 1;
                        }
                        if roll == 999 || (roll == 998 && i % 2 == 0) {
                            server.expire_sessions();
                            faults.lock().unwrap()[4] += 1;
                        }
                        let outcome = session
                            .request_with(
                                "tools/call",
                                Some(json!({
                                    "name": "tool-001",
                                    "arguments": {"request": i, "task": t},
                                })),
                                RequestOptions::default().timeout(PER_REQUEST),
                            )
                            .await;
                        let outcome = match outcome {
                            Ok(result) => {
                                // Its own result, not another request's.
                                assert_eq!(result["structuredContent"]["tool"], "tool-001");
                                assert_eq!(
                                    result["structuredContent"]["arguments"],
                                    json!({"request": i, "task": t}),
                                    "request {i} got another request's result"
                                );
                                Outcome::Ok
                            }
                            Err(error) => Outcome::Err(error.to_string()),
                        };
                        let slot = &mut outcomes.lock().unwrap()[i];
                        assert!(slot.is_none(), "request {i} resolved twice");
                        *slot = Some(outcome);
                    }
                })
            })
            .collect();
        let all = async {
            for task in tasks {
                task.await.expect("no task panicked");
            }
        };
        tokio::time::timeout(WHOLE_RUN, all)
            .await
            .expect("every request resolves within the run's bound");
        let elapsed = started.elapsed();

        let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
        let missing = outcomes.iter().filter(|o| o.is_none()).count();
        assert_eq!(missing, 0, "requests that never resolved");
        let errors: Vec<&String> = outcomes
            .iter()
            .filter_map(|o| match o {
                Some(Outcome::Err(e)) => Some(e),
                _ => None,
            })
            .collect();
        let ok = outcomes
            .iter()
            .filter(|o| matches!(o, Some(Outcome::Ok)))
            .count();
        assert_eq!(ok + errors.len(), REQUESTS);
        let faults = *faults.lock().unwrap();
        eprintln!(
            "soak: {REQUESTS} requests in {elapsed:?}: {ok} ok, {} errors; faults \
             [500, cut, delay, hang, expire] = {faults:?}",
            errors.len()
        );
        // Each fault fails at most one request (a cut may fail after its
        // resumption too; an expiry fails at most the requests caught
        // mid-way), so most requests succeed.
        assert!(
            ok >= REQUESTS * 3 / 4,
            "{ok} ok of {REQUESTS}; first errors: {:?}",
            &errors[..errors.len().min(10)]
        );
        assert!(
            faults.iter().all(|&n| n > 0),
            "every fault kind ran: {faults:?}"
        );

        // Both sessions still work once the faults are gone.
        server.clear_faults();
        for session in &sessions {
            let result = session
                .call_tool("tool-002", json!({"last": true}))
                .await
                .unwrap();
            assert_eq!(
                result["structuredContent"]["arguments"],
                json!({"last": true})
            );
        }
        let deletes = sessions.iter().filter(|s| s.session_id().is_some()).count();
        for session in sessions {
            let session = Arc::into_inner(session).expect("the tasks are done");
            session.close().await;
        }
        mcp_scoped_http::shutdown().await;
        assert!(
            eventually(Duration::from_secs(5), || mcp_scoped_http::ledger()
                == ledger_before)
            .await,
            "ledger {:?}, before {ledger_before:?}",
            mcp_scoped_http::ledger()
        );
        assert_eq!(server.stats().live_sessions, 0, "every session DELETEd");
        let server = Arc::into_inner(server).expect("the tasks are done");
        baseline.check(&server, deletes).await;
    });
}
