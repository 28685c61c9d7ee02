//! The fleet's clients (issue 21): owned clients cached by client
//! settings, shared by the slots asking for equal ones, built once when
//! they start together, dropped with the last slot using them; lent
//! clients used and never closed; credentials per slot on a shared client;
//! hooks and OAuth as parts of a spec, compared by identity. Every test
//! ends with the baseline check (FAULTS.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::baseline::World;
use crate::support::fleet::*;
use crate::support::*;
use mcp_scoped_http::fleet::{Fleet, FleetEvent, ServerSpec, SlotState};
use mcp_scoped_http::{Connector, HeaderHook, HttpClient, HttpClientBuilder};
use serde_json::json;

/// Client settings other than the defaults (a value built anew each time:
/// equal settings, never the same value).
fn custom() -> HttpClientBuilder {
    HttpClientBuilder::new().pool_max_idle_per_host(4)
}

fn owned_clients() -> usize {
    mcp_scoped_http::ledger().owned_clients
}

fn all_ready(fleet: &Fleet) -> bool {
    fleet.states().values().all(SlotState::is_ready)
}

#[test]
fn servers_with_equal_client_settings_share_one_owned_client() {
    scenario(async {
        let other = TestServer::start(ServerConfig::default());
        let world = World::new(ServerConfig::default()).await;
        let before = owned_clients();
        let fleet = fleet();
        fleet
            .apply([
                ("a", spec(&world.server).client_settings(custom())),
                ("b", spec(&other).client_settings(custom())),
                (
                    "c",
                    spec(&world.server).bearer("c").client_settings(custom()),
                ),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || all_ready(&fleet)).await);
        assert_eq!(owned_clients(), before + 1, "one client for a, b and c");
        // Equal settings in a new value are the same server: untouched.
        let report = fleet
            .apply([
                ("a", spec(&world.server).client_settings(custom())),
                ("b", spec(&other).client_settings(custom())),
                (
                    "c",
                    spec(&world.server).bearer("c").client_settings(custom()),
                ),
            ])
            .await
            .unwrap();
        assert_eq!(report.unchanged, ["a", "b", "c"]);
        assert_eq!(owned_clients(), before + 1);
        finish(fleet, &world, &[&other], "equal settings").await;
    });
}

#[test]
fn servers_with_different_client_settings_get_a_client_each() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let before = owned_clients();
        let fleet = fleet();
        fleet
            .apply([
                ("a", spec(&world.server)),
                ("b", spec(&world.server).client_settings(custom())),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || all_ready(&fleet)).await);
        assert_eq!(owned_clients(), before + 2, "the defaults', and b's");
        // Other settings make another server: b is replaced, onto a client
        // of its new settings (its old one goes with it).
        let report = fleet
            .apply([
                ("a", spec(&world.server)),
                (
                    "b",
                    spec(&world.server).client_settings(custom().tcp_quickack(false)),
                ),
            ])
            .await
            .unwrap();
        assert_eq!(report.replaced, ["b"]);
        assert_eq!(report.unchanged, ["a"]);
        assert!(eventually(SETTLE, || is(&fleet, "b", "ready")).await);
        assert!(eventually(SETTLE, || owned_clients() == before + 2).await);
        finish(fleet, &world, &[], "different settings").await;
    });
}

#[test]
fn the_last_slot_using_an_owned_client_drops_it_and_a_later_slot_builds_anew() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let before = owned_clients();
        let fleet = fleet();
        let keep = ("keep", spec(&world.server));
        fleet
            .apply([
                keep.clone(),
                ("a", spec(&world.server).client_settings(custom())),
                ("b", spec(&world.server).client_settings(custom())),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || all_ready(&fleet)).await);
        assert_eq!(owned_clients(), before + 2);
        // One of the two goes: the client stays for the other.
        fleet
            .apply([
                keep.clone(),
                ("b", spec(&world.server).client_settings(custom())),
            ])
            .await
            .unwrap();
        assert_eq!(owned_clients(), before + 2);
        fleet.call_tool("b", "tool-000", json!({})).await.unwrap();
        // The last goes: so does its client (its connection tasks with it),
        // and only that one.
        let report = fleet.apply([keep.clone()]).await.unwrap();
        assert_eq!(report.stopped, ["b"]);
        assert!(
            eventually(SETTLE, || owned_clients() == before + 1).await,
            "{:?}",
            mcp_scoped_http::ledger()
        );
        // A later slot with those settings builds a new one.
        fleet
            .apply([
                keep.clone(),
                ("c", spec(&world.server).client_settings(custom())),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "c", "ready")).await);
        assert_eq!(owned_clients(), before + 2);
        fleet.call_tool("c", "tool-000", json!({})).await.unwrap();
        finish(fleet, &world, &[], "eviction").await;
    });
}

#[test]
fn slots_starting_together_with_equal_settings_build_one_client() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let before = owned_clients();
        let fleet = fleet();
        let names: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
        fleet
            .apply(
                names
                    .iter()
                    .map(|name| (name.clone(), spec(&world.server).client_settings(custom()))),
            )
            .await
            .unwrap();
        // Counted while they connect, and once all are ready.
        assert!(owned_clients() <= before + 1);
        assert!(eventually(SETTLE, || all_ready(&fleet)).await);
        assert_eq!(owned_clients(), before + 1);
        finish(fleet, &world, &[], "single flight").await;
    });
}

#[cfg(feature = "rustls")]
#[test]
fn a_client_that_cannot_be_built_fails_each_slot_asking_and_is_not_kept() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let before = owned_clients();
        let fleet = fleet();
        let broken = || {
            spec(&world.server).client_settings(custom().add_root_certificate(b"not DER".to_vec()))
        };
        fleet
            .apply([("a", broken()), ("b", broken()), ("c", broken())])
            .await
            .unwrap();
        assert!(
            eventually(SETTLE, || ["a", "b", "c"]
                .iter()
                .all(|name| is(&fleet, name, "failed")))
            .await,
            "{:?}",
            fleet.states()
        );
        for name in ["a", "b", "c"] {
            let error = fleet.state(name).unwrap().error().cloned().unwrap();
            assert!(error.is_builder(), "{name}: {error}");
            assert!(error.to_string().contains("root certificate"), "{error}");
        }
        assert_eq!(owned_clients(), before);
        assert!(seen(&world.server, "initialize").is_empty(), "nothing sent");
        // Not kept: a reconnect asks again (and fails again, the same way).
        let mut events = fleet.events();
        fleet.reconnect("a").unwrap();
        let mut states = Vec::new();
        let again = tokio::time::timeout(SETTLE, async {
            loop {
                if let Ok(FleetEvent::State { server, state, .. }) = events.recv().await
                    && &*server == "a"
                {
                    states.push(state.name());
                    if state.name() == "failed" {
                        break;
                    }
                }
            }
        })
        .await;
        assert!(again.is_ok(), "{states:?}");
        assert_eq!(states, ["starting", "failed"]);
        // Fixed settings are a changed server: replaced, and ready.
        let report = fleet
            .apply([
                ("a", spec(&world.server).client_settings(custom())),
                ("b", broken()),
            ])
            .await
            .unwrap();
        assert_eq!(report.replaced, ["a"]);
        assert_eq!(report.unchanged, ["b"]);
        assert_eq!(report.stopped, ["c"]);
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        assert_eq!(owned_clients(), before + 1);
        finish(fleet, &world, &[], "failed build").await;
    });
}

#[test]
fn a_lent_client_is_used_by_any_number_of_slots_and_never_closed() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        // The caller's own owned client, lent too.
        let owned = HttpClient::owned().unwrap();
        let before = owned_clients();
        let borrowed = world.caller.client.clone();
        fleet
            .apply([
                (
                    "a",
                    spec(&world.server).client(borrowed.clone()).bearer("a"),
                ),
                (
                    "b",
                    spec(&world.server).client(borrowed.clone()).bearer("b"),
                ),
                ("c", spec(&world.server).client(owned.clone()).bearer("c")),
                ("d", spec(&world.server).client(owned.clone()).bearer("d")),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || all_ready(&fleet)).await);
        assert_eq!(owned_clients(), before, "no client of the fleet's own");
        assert_eq!(borrowed.hooks().len(), 2);
        assert_eq!(owned.ledger().owned_sessions, 2);
        fleet.shutdown().await;
        drop(fleet);
        mcp_scoped_http::shutdown().await;
        // Both still serve their owner, with nothing of ours left on them.
        assert!(borrowed.hooks().is_empty());
        assert!(owned.hooks().is_empty());
        assert_eq!(owned.ledger().owned_sessions, 0);
        let session = Connector::new(world.server.url())
            .client(owned.clone())
            .connect()
            .await
            .expect("the lent owned client still works");
        session.close().await;
        drop(owned);
        let log = assert_each_session_deleted_once(&world.server, "lent").await;
        world
            .baseline
            .check(&world.server, deletes_owed(&log))
            .await;
    });
}

#[test]
fn credentials_stay_per_slot_on_a_shared_client() {
    scenario(async {
        let other = TestServer::start(ServerConfig::default());
        let world = World::new(ServerConfig::default()).await;
        let before = owned_clients();
        let asked = Arc::new(AtomicUsize::new(0));
        let provider = {
            let asked = asked.clone();
            HeaderHook::provider(move || {
                asked.fetch_add(1, Ordering::SeqCst);
                async {
                    let mut headers = http::HeaderMap::new();
                    headers.insert("x-hook", http::HeaderValue::from_static("b-hook"));
                    Ok(headers)
                }
            })
        };
        let fleet = fleet();
        fleet
            .apply([
                (
                    "a",
                    spec(&world.server)
                        .bearer("token-a")
                        .header("x-server", "a")
                        .hook(HeaderHook::header("x-hook", "a-hook").unwrap()),
                ),
                (
                    "b",
                    spec(&other)
                        .bearer("token-b")
                        .header("x-server", "b")
                        .hook(provider),
                ),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || all_ready(&fleet)).await);
        assert_eq!(owned_clients(), before + 1, "one client for both");
        fleet.call_tool("a", "tool-000", json!({})).await.unwrap();
        fleet.call_tool("b", "tool-000", json!({})).await.unwrap();
        fleet.shutdown().await;
        // Every request each server saw (DELETEs included) carried its own
        // credentials, never the other's.
        for (server, name) in [(&world.server, "a"), (&other, "b")] {
            let ours: Vec<RecordedRequest> = server
                .requests()
                .into_iter()
                .filter(|r| r.header("x-caller") != Some("own"))
                .collect();
            assert!(ours.len() >= 3, "{name}: {ours:?}");
            for request in &ours {
                assert_eq!(
                    request.header("authorization"),
                    Some(format!("Bearer token-{name}").as_str()),
                    "{name}: {request:?}"
                );
                assert_eq!(request.header("x-server"), Some(name), "{request:?}");
                assert_eq!(
                    request.header("x-hook"),
                    Some(format!("{name}-hook").as_str()),
                    "{request:?}"
                );
            }
        }
        assert!(asked.load(Ordering::SeqCst) > 0);
        finish(fleet, &world, &[&other], "credentials").await;
    });
}

#[test]
fn a_hook_compares_by_identity() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let provider = HeaderHook::provider(|| async {
            let mut headers = http::HeaderMap::new();
            headers.insert("x-hook", http::HeaderValue::from_static("1"));
            Ok(headers)
        });
        let fleet = fleet();
        let desired = |hook: &HeaderHook| [("a", spec(&world.server).hook(hook.clone()))];
        assert_eq!(
            fleet.apply(desired(&provider)).await.unwrap().started,
            ["a"]
        );
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let initialized = seen(&world.server, "initialize").len();
        // The same hook (clones of it) twice: untouched, no reconnect.
        for _ in 0..2 {
            let report = fleet.apply(desired(&provider)).await.unwrap();
            assert_eq!(report.unchanged, ["a"]);
        }
        assert_eq!(seen(&world.server, "initialize").len(), initialized);
        // A new hook, even one doing the same: replaced.
        let lookalike = HeaderHook::provider(|| async {
            let mut headers = http::HeaderMap::new();
            headers.insert("x-hook", http::HeaderValue::from_static("1"));
            Ok(headers)
        });
        assert_eq!(
            fleet.apply(desired(&lookalike)).await.unwrap().replaced,
            ["a"]
        );
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        finish(fleet, &world, &[], "hook identity").await;
    });
}

#[cfg(feature = "oauth")]
#[test]
fn oauth_is_part_of_a_spec_compared_by_identity_and_a_refusal_without_it_waits() {
    use crate::support::oauth::headless;
    use mcp_scoped_http_testkit::{AuthConfig, AuthServer};

    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let world = World::new(
            ServerConfig::default()
                .with_tools(2)
                .with_authorization(auth.resource()),
        )
        .await;
        let oauth = headless();
        let fleet = fleet();
        // No bearer of our own: the flow's token is the one to send.
        let bare = || {
            ServerSpec::new(world.server.url())
                .connect_timeout(SETTLE)
                .request_timeout(SETTLE)
                .delete_timeout(500 * MS)
        };
        let desired = |oauth: &mcp_scoped_http::oauth::OAuth| {
            [
                ("authorized", bare().oauth(oauth.clone())),
                ("plain", bare()),
            ]
        };
        fleet.apply(desired(&oauth)).await.unwrap();
        // The refusal runs the flow for the slot with OAuth; the other
        // waits for a person.
        assert!(eventually(SETTLE, || is(&fleet, "authorized", "ready")).await);
        assert!(eventually(SETTLE, || is(&fleet, "plain", "auth_required")).await);
        assert_eq!(auth.stats().code_grants, 1);
        fleet
            .call_tool("authorized", "tool-000", json!({}))
            .await
            .unwrap();
        // Clones of the same OAuth, twice: untouched.
        for _ in 0..2 {
            let report = fleet.apply(desired(&oauth)).await.unwrap();
            assert_eq!(report.unchanged, ["authorized", "plain"]);
        }
        assert!(is(&fleet, "authorized", "ready"));
        assert_eq!(auth.stats().code_grants, 1, "no second flow");
        // A new OAuth value: replaced (and authorized anew).
        let report = fleet.apply(desired(&headless())).await.unwrap();
        assert_eq!(report.replaced, ["authorized"]);
        assert_eq!(report.unchanged, ["plain"]);
        assert!(eventually(SETTLE, || is(&fleet, "authorized", "ready")).await);
        assert_eq!(auth.stats().code_grants, 2);
        finish(fleet, &world, &[], "oauth").await;
    });
}
