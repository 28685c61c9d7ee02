//! The fleet (issue 21): slots with one owner task each, reconcile by
//! name, reconnects, the merged catalog, routed calls, shutdown and drop.
//! The seeds' stories as named tests; every test ends with the baseline
//! check (FAULTS.md).

use crate::support;

use std::time::{Duration, Instant};

use crate::support::baseline::World;
use crate::support::fleet::*;
use crate::support::*;
use mcp_scoped_http::Backoff;
use mcp_scoped_http::fleet::{Fleet, FleetEvent, ServerShutdown, ServerSpec, SlotState};
use mcp_scoped_http::{Progress, RequestOptions};
use serde_json::json;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

/// A URL on which nothing listens: connections are refused.
fn attempt(fleet: &Fleet, server: &str) -> u32 {
    fleet
        .state(server)
        .and_then(|state| state.attempt())
        .unwrap_or(0)
}

/// POSTs to `server` fail below HTTP (the connection closes): the server
/// is down for MCP, while DELETEs still reach it.
fn take_down(server: &TestServer) {
    server.push_fault(Fault::on_http(
        http::Method::POST,
        FaultAction::CloseConnection,
    ));
}

/// The requests of ours the server saw (the caller's own left out).
fn ours(server: &TestServer) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.header("x-caller") != Some("own"))
        .collect()
}

#[test]
fn a_failed_start_never_leaves_an_unowned_task_and_shutdown_finds_every_retrying_slot() {
    scenario(async {
        let dead = refused_url();
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let report = fleet
            .apply([
                ("up", spec(&world.server)),
                ("down-1", ServerSpec::new(&dead)),
                (
                    "down-2",
                    ServerSpec::new(&dead).client(world.caller.client.clone()),
                ),
            ])
            .await
            .unwrap();
        assert_eq!(report.started, ["down-1", "down-2", "up"]);
        // Up before the rest is looked at: on a loaded machine its connect
        // can take longer than the dead ones' first retries.
        assert!(
            eventually(SETTLE, || is(&fleet, "up", "ready")).await,
            "{:?}",
            fleet.states()
        );
        // Both keep retrying in their own slot, with a growing count.
        assert!(
            eventually(SETTLE, || attempt(&fleet, "down-1") >= 3
                && attempt(&fleet, "down-2") >= 3)
            .await,
            "{:?}",
            fleet.states()
        );
        let error = fleet.state("down-1").unwrap().error().cloned().unwrap();
        assert!(error.is_transport() && error.is_retryable(), "{error}");

        // Rediscovery (a second apply) never builds a second slot beside
        // a retrying one: it is the same slot, still counting.
        let before = fleet.watch("down-1").unwrap();
        let again = fleet
            .apply([
                ("up", spec(&world.server)),
                ("down-1", ServerSpec::new(&dead)),
            ])
            .await
            .unwrap();
        assert_eq!(again.unchanged, ["down-1", "up"]);
        assert_eq!(again.stopped, ["down-2"]);
        assert!(fleet.state("down-2").is_none());
        // Its watch from before still follows it: the same slot.
        let mut watch = before;
        for _ in 0..2 {
            tokio::time::timeout(SETTLE, watch.changed())
                .await
                .expect("the slot goes on retrying")
                .unwrap();
            assert!(!matches!(*watch.borrow(), SlotState::Stopped));
        }

        // Shutdown finds every slot, the retrying one included.
        let report = fleet.shutdown().await;
        assert_eq!(
            report.servers.keys().collect::<Vec<_>>(),
            ["down-1", "up"],
            "{report:?}"
        );
        assert!(matches!(
            report.servers["down-1"],
            ServerShutdown::NoSession
        ));
        assert!(
            matches!(report.servers["up"], ServerShutdown::Closed(_)),
            "{report:?}"
        );
        assert!(fleet.shutdown().await.already_shut_down);
        let refused = fleet.apply([("x", ServerSpec::new(&dead))]).await;
        assert!(refused.unwrap_err().is_closed());
        finish(fleet, &world, &[], "failed start").await;
    });
}

#[test]
fn each_slot_has_exactly_one_task_for_its_whole_life() {
    scenario(async {
        let dead = refused_url();
        let world = World::new(ServerConfig::default()).await;
        let before = mcp_scoped_http::ledger().tasks;
        let fleet = fleet();
        let desired = |names: &[&'static str]| -> Vec<(&'static str, ServerSpec)> {
            names.iter().map(|n| (*n, ServerSpec::new(&dead))).collect()
        };
        fleet.apply(desired(&["x", "y", "z"])).await.unwrap();
        for round in 1..=3 {
            // However many failures and waits: one task per slot, no more.
            assert!(
                eventually(SETTLE, || ["x", "y", "z"]
                    .iter()
                    .all(|n| attempt(&fleet, n) >= 2 * round))
                .await
            );
            assert_eq!(mcp_scoped_http::ledger().tasks, before + 3, "round {round}");
            // Rediscovery with the same set builds nothing beside them.
            assert!(
                fleet
                    .apply(desired(&["x", "y", "z"]))
                    .await
                    .unwrap()
                    .is_noop()
            );
            assert_eq!(mcp_scoped_http::ledger().tasks, before + 3);
        }
        // Removed: its task has ended when apply returns.
        fleet.apply(desired(&["x", "y"])).await.unwrap();
        assert_eq!(mcp_scoped_http::ledger().tasks, before + 2);
        finish(fleet, &world, &[], "one task per slot").await;
    });
}

#[test]
fn a_second_apply_with_the_same_config_creates_nothing() {
    scenario(async {
        let other = TestServer::start(ServerConfig::default());
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let desired = vec![
            ("a", spec(&world.server).client(world.caller.client.clone())),
            ("b", spec(&other)),
        ];
        fleet.apply(desired.clone()).await.unwrap();
        fleet.ready(SETTLE).await.unwrap();
        assert!(eventually(SETTLE, || fleet.states().values().all(SlotState::is_ready)).await);
        let catalog = fleet.catalog();
        let created = (
            world.server.stats().sessions_created,
            other.stats().sessions_created,
        );
        assert_eq!(created, (1, 1));

        // The same specs, and a change of `required` only: nothing moves.
        let desired = vec![
            ("a", desired[0].1.clone().required(true)),
            ("b", spec(&other)),
        ];
        let report = fleet.apply(desired).await.unwrap();
        assert!(report.is_noop(), "{report:?}");
        assert_eq!(report.unchanged, ["a", "b"]);
        assert_eq!(
            (
                world.server.stats().sessions_created,
                other.stats().sessions_created
            ),
            created
        );
        let now = fleet.catalog();
        assert_eq!(now.generation, catalog.generation);
        for server in ["a", "b"] {
            assert!(std::sync::Arc::ptr_eq(
                &now.servers[server],
                &catalog.servers[server]
            ));
        }
        assert_eq!(world.server.stats().deletes + other.stats().deletes, 0);

        // A changed spec is replaced: a new session, the old one DELETEd
        // before apply returns.
        let report = fleet
            .apply([
                ("a", spec(&world.server).bearer("rotated")),
                ("b", spec(&other)),
            ])
            .await
            .unwrap();
        assert_eq!(report.replaced, ["a"]);
        assert_eq!(world.server.stats().deletes, 1);
        fleet.ready(SETTLE).await.unwrap();
        finish(fleet, &world, &[&other], "same config").await;
    });
}

#[test]
fn a_disabled_slot_stops_while_waiting_to_retry() {
    scenario(async {
        let dead = refused_url();
        let world = World::new(ServerConfig::default()).await;
        // A long backoff: the slot is surely waiting when disabled.
        let fleet = Fleet::builder()
            .backoff(Backoff::new(
                Duration::from_secs(30),
                Duration::from_secs(30),
            ))
            .build();
        fleet
            .apply([("a", spec(&world.server)), ("down", ServerSpec::new(&dead))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "down", "retrying")).await);
        let mut watch = fleet.watch("down").unwrap();
        let started = Instant::now();
        let report = fleet
            .apply([
                ("a", spec(&world.server)),
                ("down", ServerSpec::new(&dead).enabled(false)),
            ])
            .await
            .unwrap();
        assert_eq!(report.stopped, ["down"]);
        assert!(started.elapsed() < Duration::from_secs(2));
        // Stopped when apply returned: its last state is out.
        assert!(matches!(*watch.borrow_and_update(), SlotState::Stopped));
        assert!(fleet.state("down").is_none());
        let error = fleet
            .call_tool("down", "tool-000", json!({}))
            .await
            .unwrap_err();
        assert!(error.is_closed(), "{error}");
        assert!(error.to_string().contains("disabled"), "{error}");
        finish(fleet, &world, &[], "disabled while retrying").await;
    });
}

#[test]
fn a_disabled_slot_stops_while_connecting() {
    scenario(async {
        let world = World::new(
            ServerConfig::default().with_fault(Fault::on_rpc("initialize", FaultAction::Hang)),
        )
        .await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || seen(&world.server, "initialize").len() == 1).await);
        assert!(is(&fleet, "a", "starting"));
        let report = fleet
            .apply([("a", spec(&world.server).enabled(false))])
            .await
            .unwrap();
        assert_eq!(report.stopped, ["a"]);
        assert!(fleet.states().is_empty());
        // Nothing of ours reaches the server after apply returned.
        let seen_then = ours(&world.server).len();
        mcp_scoped_http::shutdown().await;
        assert_eq!(ours(&world.server).len(), seen_then);
        finish(fleet, &world, &[], "disabled while connecting").await;
    });
}

/// The events of one server, up to now.
fn drain_states(
    events: &mut tokio::sync::broadcast::Receiver<FleetEvent>,
    server: &str,
) -> Vec<SlotState> {
    let mut states = Vec::new();
    loop {
        match events.try_recv() {
            Ok(FleetEvent::State {
                server: s, state, ..
            }) if &*s == server => states.push(state),
            Ok(_) => {}
            Err(TryRecvError::Empty | TryRecvError::Closed) => return states,
            Err(TryRecvError::Lagged(n)) => panic!("lost {n} events"),
        }
    }
}

#[test]
fn a_revived_server_s_tools_are_back_in_the_catalog() {
    scenario(async {
        let other = TestServer::start(ServerConfig::default().with_tools(2));
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let mut events = fleet.events();
        fleet
            .apply([
                ("a", spec(&world.server).required(true)),
                ("b", spec(&other).required(true)),
            ])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.unwrap();
        let before = fleet.catalog();
        assert_eq!(before.tool_count(), 5);
        let names: Vec<String> = before.tools().filter_map(|t| t.qualified_name()).collect();
        assert_eq!(
            names,
            [
                "a__tool-000",
                "a__tool-001",
                "a__tool-002",
                "b__tool-000",
                "b__tool-001"
            ]
        );
        let answer = fleet
            .call_qualified("a__tool-001", json!({"text": "hi"}))
            .await
            .unwrap();
        assert_eq!(answer["structuredContent"]["tool"], "tool-001");

        // The server goes down under a ready session: the call fails, says
        // it may have run, and is not sent again.
        take_down(&world.server);
        let error = fleet
            .call_tool("a", "tool-000", json!({"text": "lost"}))
            .await
            .unwrap_err();
        // A transport error, or closed when the session saw the server go
        // first (its listening stream): the fleet reads both as lost.
        assert!(error.is_transport() || error.is_closed(), "{error:?}");
        assert!(
            error.to_string().contains("may or may not have run"),
            "{error}"
        );
        let calls_then = seen(&world.server, "tools/call").len();
        assert!(eventually(SETTLE, || is(&fleet, "a", "retrying")).await);
        let lost = fleet.catalog();
        assert!(lost.generation > before.generation);
        assert!(lost.tool("a__tool-000").is_none());
        assert!(lost.tool("b__tool-000").is_some());
        let refused = fleet
            .call_tool("a", "tool-000", json!({}))
            .await
            .unwrap_err();
        assert!(
            refused.is_closed() && refused.to_string().contains("not ready"),
            "{refused}"
        );

        // It comes back: so do its tools, by the time it is ready.
        world.server.clear_faults();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let back = fleet.catalog();
        assert!(back.generation > lost.generation);
        assert!(back.tool("a__tool-000").is_some());
        assert_eq!(back.tool_count(), 5);
        fleet.call_tool("a", "tool-002", json!({})).await.unwrap();
        // The lost call was never sent again.
        assert_eq!(seen(&world.server, "tools/call").len(), calls_then + 1);

        // The events told it all, in order; catalog generations only grow.
        let states: Vec<&str> = drain_states(&mut events, "a")
            .iter()
            .map(SlotState::name)
            .collect();
        assert_eq!(states.first(), Some(&"starting"));
        assert_eq!(states.last(), Some(&"ready"));
        let lost_at = states.iter().position(|s| *s == "retrying").unwrap();
        assert_eq!(states[lost_at - 1], "ready");
        finish(fleet, &world, &[&other], "revival").await;
    });
}

#[test]
fn prompts_and_resources_are_routed_too() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let catalog = fleet.catalog();
        let prompts: Vec<String> = catalog
            .prompts()
            .filter_map(|p| p.qualified_name())
            .collect();
        assert_eq!(prompts, ["a__prompt-000", "a__prompt-001"]);
        assert!(catalog.prompt("a__prompt-001").is_some());
        assert_eq!(catalog.resources().count(), 2);
        fleet
            .get_prompt("a", "prompt-000", json!({}))
            .await
            .unwrap();
        let uri = catalog
            .resources()
            .next()
            .unwrap()
            .name()
            .unwrap()
            .to_owned();
        fleet.read_resource("a", &uri).await.unwrap();
        let refused = fleet.request("a", "initialize", None).await.unwrap_err();
        assert!(refused.is_builder(), "{refused}");
        finish(fleet, &world, &[], "prompts and resources").await;
    });
}

#[test]
fn servers_that_lend_no_client_share_one_owned_by_the_fleet() {
    scenario(async {
        let other = TestServer::start(ServerConfig::default());
        let world = World::new(ServerConfig::default()).await;
        let before = mcp_scoped_http::ledger().owned_clients;
        let fleet = fleet();
        fleet
            .apply([
                ("a", spec(&world.server)),
                ("b", spec(&other)),
                ("c", spec(&world.server).bearer("c")),
                (
                    "lent",
                    spec(&world.server).client(world.caller.client.clone()),
                ),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || fleet.states().values().all(SlotState::is_ready)).await);
        // One for a, b and c together; none for the lent one.
        assert_eq!(mcp_scoped_http::ledger().owned_clients, before + 1);
        // Each session's credentials stay its own.
        fleet.call_tool("a", "tool-000", json!({})).await.unwrap();
        fleet.call_tool("c", "tool-000", json!({})).await.unwrap();
        let auth: Vec<Option<String>> = seen(&world.server, "tools/call")
            .iter()
            .map(|r| r.header("authorization").map(str::to_owned))
            .collect();
        assert_eq!(
            auth,
            [
                Some("Bearer fleet-token".to_owned()),
                Some("Bearer c".to_owned())
            ]
        );
        // The last slot holding it goes: so does the client.
        fleet
            .apply([(
                "lent",
                spec(&world.server).client(world.caller.client.clone()),
            )])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || mcp_scoped_http::ledger().owned_clients == before).await);
        // And a new one is made when a slot needs it again.
        fleet
            .apply([
                ("a", spec(&world.server)),
                (
                    "lent",
                    spec(&world.server).client(world.caller.client.clone()),
                ),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        assert_eq!(mcp_scoped_http::ledger().owned_clients, before + 1);
        finish(fleet, &world, &[&other], "shared client").await;
    });
}

#[test]
fn the_catalog_events_come_in_generation_order() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let mut events = fleet.events();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        fleet
            .apply(Vec::<(String, ServerSpec)>::new())
            .await
            .unwrap();
        let mut generations = Vec::new();
        while let Ok(event) = events.try_recv() {
            if let FleetEvent::Catalog {
                generation, tools, ..
            } = event
            {
                generations.push((generation, tools));
            }
        }
        assert_eq!(generations, [(1, 3), (2, 0)]);
        finish(fleet, &world, &[], "catalog events").await;
    });
}

#[test]
fn a_healthy_reconnect_resets_the_attempt_count() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = Fleet::builder()
            .backoff(Backoff::new(5 * MS, 20 * MS))
            .health_interval(Some(10 * MS))
            .health_timeout(Duration::from_secs(1))
            .stable_after(50 * MS)
            .build();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);

        // Down: the health ping notices, and failures pile up.
        take_down(&world.server);
        assert!(eventually(SETTLE, || attempt(&fleet, "a") >= 4).await);

        // Back: the new session proves itself (its pings are answered) and
        // stays up past `stable_after` (8 more pings, 10 ms apart).
        world.server.clear_faults();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let pings = seen(&world.server, "ping").len();
        assert!(eventually(SETTLE, || seen(&world.server, "ping").len() >= pings + 8).await);

        // Lost again: counting starts at 1, not where it was.
        let mut events = fleet.events();
        take_down(&world.server);
        assert!(eventually(SETTLE, || is(&fleet, "a", "retrying")).await);
        let first = drain_states(&mut events, "a")
            .into_iter()
            .find_map(|state| state.attempt());
        assert_eq!(first, Some(1));
        world.server.clear_faults();
        finish(fleet, &world, &[], "healthy reconnect").await;
    });
}

#[test]
fn a_session_lost_before_answering_does_not_reset_the_count() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        // Connects work, every ping fails: the session never proves itself.
        world
            .server
            .push_fault(Fault::on_rpc("ping", FaultAction::CloseConnection));
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(
            eventually(SETTLE, || attempt(&fleet, "a") >= 3).await,
            "{:?}",
            fleet.states()
        );
        assert!(world.server.stats().sessions_created >= 3);
        world.server.clear_faults();
        finish(fleet, &world, &[], "unproven").await;
    });
}

#[test]
fn auth_refusals_wait_for_reconnect_and_bad_urls_fail() {
    scenario(async {
        let world =
            World::new(ServerConfig::default().with_fault(
                Fault::on_rpc("initialize", FaultAction::unauthorized("Bearer")).times(1),
            ))
            .await;
        let fleet = fleet();
        fleet
            .apply([
                ("a", spec(&world.server)),
                ("bad", ServerSpec::new("not a url")),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "auth_required")).await);
        assert!(eventually(SETTLE, || is(&fleet, "bad", "failed")).await);
        let error = fleet.state("bad").unwrap().error().cloned().unwrap();
        assert!(error.is_builder(), "{error}");
        // No hammering: one initialize, however long we look.
        assert_eq!(seen(&world.server, "initialize").len(), 1);
        let err = fleet.ready(SETTLE).await;
        assert!(err.is_ok(), "nothing required: {err:?}");
        // Required now (no restart for that): ready says so at once, since
        // no retry will come by itself.
        let report = fleet
            .apply([
                ("a", spec(&world.server)),
                ("bad", ServerSpec::new("not a url").required(true)),
            ])
            .await
            .unwrap();
        assert_eq!(report.unchanged, ["a", "bad"]);
        let started = Instant::now();
        let error = fleet.ready(SETTLE).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(error.to_string().contains("`bad` is failed"), "{error}");

        // A person fixed it: reconnect.
        fleet.reconnect("a").unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        assert!(fleet.reconnect("nope").unwrap_err().is_builder());
        finish(fleet, &world, &[], "auth").await;
    });
}

#[test]
fn a_session_that_was_up_is_retried_whatever_ends_it() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = Fleet::builder()
            .backoff(Backoff::new(5 * MS, 20 * MS))
            .health_interval(Some(10 * MS))
            .build();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        // A bare 400 to the health ping: on connect that would be "failed";
        // here the spec is known good, so it is retried.
        let mut events = fleet.events();
        world.server.push_fault(
            Fault::on_rpc("ping", FaultAction::status(400))
                .http_method(http::Method::POST)
                .times(1),
        );
        let mut retried = false;
        let back = eventually(SETTLE, || {
            retried |= drain_states(&mut events, "a")
                .iter()
                .any(|s| s.name() == "retrying");
            retried && is(&fleet, "a", "ready")
        })
        .await;
        assert!(back, "{:?}", fleet.states());
        assert!(world.server.stats().sessions_created >= 2);
        finish(fleet, &world, &[], "lost with a 400").await;
    });
}

#[test]
fn reconnect_wakes_a_waiting_slot_at_once() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = Fleet::builder()
            .backoff(Backoff::new(
                Duration::from_secs(60),
                Duration::from_secs(60),
            ))
            .build();
        take_down(&world.server);
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "retrying")).await);
        // Waiting up to a minute (full jitter: most likely many seconds).
        let SlotState::Retrying { next_at, .. } = fleet.state("a").unwrap() else {
            unreachable!()
        };
        world.server.clear_faults();
        fleet.reconnect("a").unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        // Ready before its turn (when the draw left time to tell).
        if next_at > Instant::now() + Duration::from_secs(1) {
            assert!(Instant::now() < next_at);
        }
        finish(fleet, &world, &[], "reconnect").await;
    });
}

#[test]
fn a_lent_client_survives_everything() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let lent = world.caller.client.clone();
        let fleet = Fleet::builder()
            .backoff(Backoff::new(5 * MS, 20 * MS))
            .health_interval(Some(10 * MS))
            .build();
        let desired = |token: &str, enabled: bool| {
            vec![
                (
                    "a",
                    spec(&world.server)
                        .client(lent.clone())
                        .bearer(token)
                        .enabled(enabled),
                ),
                ("b", spec(&world.server).client(lent.clone()).bearer("b")),
            ]
        };
        fleet.apply(desired("a", true)).await.unwrap();
        assert!(eventually(SETTLE, || fleet.states().values().all(SlotState::is_ready)).await);
        assert_eq!(lent.hooks().len(), 2);
        // Lost and revived.
        take_down(&world.server);
        assert!(eventually(SETTLE, || attempt(&fleet, "a") >= 2).await);
        world.server.clear_faults();
        assert!(eventually(SETTLE, || fleet.states().values().all(SlotState::is_ready)).await);
        // Replaced, disabled, enabled again.
        assert_eq!(
            fleet.apply(desired("a2", true)).await.unwrap().replaced,
            ["a"]
        );
        assert_eq!(
            fleet.apply(desired("a2", false)).await.unwrap().stopped,
            ["a"]
        );
        assert_eq!(
            fleet.apply(desired("a2", true)).await.unwrap().started,
            ["a"]
        );
        fleet.ready(SETTLE).await.unwrap();
        assert!(eventually(SETTLE, || fleet.states().values().all(SlotState::is_ready)).await);
        assert_eq!(lent.hooks().len(), 2);
        // The baseline checks the client still serves the caller, without
        // our headers, and that our hooks are gone.
        finish(fleet, &world, &[], "lent client").await;
    });
}

#[test]
fn a_dead_server_does_not_delay_the_others_readiness() {
    scenario(async {
        let hung = TestServer::start(
            ServerConfig::default().with_fault(Fault::on_rpc("initialize", FaultAction::Hang)),
        );
        let dead = refused_url();
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let started = Instant::now();
        fleet
            .apply([
                ("up", spec(&world.server).required(true)),
                ("hung", spec(&hung).connect_timeout(Duration::from_secs(30))),
                ("dead", ServerSpec::new(&dead)),
            ])
            .await
            .unwrap();
        // The hung server is no error, only pending when the wait ends.
        let readiness = fleet.ready(300 * MS).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(readiness.ready, ["up"]);
        assert_eq!(readiness.pending, ["hung"]);
        assert!(is(&fleet, "hung", "starting"));

        // A required server that is down: ready says which, by its deadline.
        fleet
            .apply([
                ("up", spec(&world.server).required(true)),
                (
                    "hung",
                    spec(&hung)
                        .connect_timeout(Duration::from_secs(30))
                        .required(true),
                ),
                ("dead", ServerSpec::new(&dead)),
            ])
            .await
            .unwrap();
        let started = Instant::now();
        let error = fleet.ready(100 * MS).await.unwrap_err();
        assert!(error.is_timeout(), "{error}");
        assert!(error.to_string().contains("`hung` starting"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(2));
        finish(fleet, &world, &[], "dead server").await;
        drop(hung);
    });
}

#[test]
fn a_slow_reader_of_events_is_told_it_lagged_and_never_blocks_the_fleet() {
    scenario(async {
        let dead = refused_url();
        let world = World::new(ServerConfig::default()).await;
        let fleet = Fleet::builder()
            .backoff(Backoff::new(MS, 2 * MS))
            .event_capacity(4)
            .build();
        let mut events = fleet.events();
        fleet
            .apply([("down", ServerSpec::new(&dead))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || attempt(&fleet, "down") >= 10).await);
        match events.recv().await {
            Err(RecvError::Lagged(lost)) => assert!(lost > 0),
            other => panic!("expected a lag, got {other:?}"),
        }
        // Then the newest events, in order.
        assert!(events.recv().await.is_ok());
        finish(fleet, &world, &[], "lagged").await;
    });
}

#[test]
fn invalid_names_are_refused_before_anything_changes() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        for bad in ["", "new\nline", &"x".repeat(65)] {
            let error = fleet
                .apply([("a", spec(&world.server)), (bad, spec(&world.server))])
                .await
                .unwrap_err();
            assert!(error.is_builder(), "{error}");
        }
        let twice = fleet
            .apply([("a", spec(&world.server)), ("a", spec(&world.server))])
            .await
            .unwrap_err();
        assert!(twice.to_string().contains("more than once"), "{twice}");
        assert_eq!(fleet.states().len(), 1);
        let error = fleet
            .call_qualified("no-separator", json!({}))
            .await
            .unwrap_err();
        assert!(error.is_builder());
        finish(fleet, &world, &[], "names").await;
    });
}

#[test]
fn dropping_the_fleet_releases_everything_through_the_reaper() {
    scenario(async {
        let dead = refused_url();
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        fleet
            .apply([
                ("a", spec(&world.server).client(world.caller.client.clone())),
                ("b", spec(&world.server)),
                ("down", ServerSpec::new(&dead)),
            ])
            .await
            .unwrap();
        assert!(
            eventually(SETTLE, || is(&fleet, "a", "ready")
                && is(&fleet, "b", "ready"))
            .await
        );
        drop(fleet);
        mcp_scoped_http::shutdown().await;
        let log = assert_each_session_deleted_once(&world.server, "drop").await;
        assert_eq!(log.len(), 2);
        world.baseline.check(&world.server, 2).await;
    });
}

#[test]
fn no_request_reaches_a_removed_server_after_apply_returns() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        world
            .server
            .push_fault(Fault::on_rpc("tools/call", FaultAction::Hang).name("tool-001"));
        let fleet = Fleet::builder()
            .backoff(Backoff::new(5 * MS, 50 * MS))
            .health_interval(Some(5 * MS))
            .build();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        // A call in flight when the server is removed.
        let call = fleet.call_tool("a", "tool-001", json!({}));
        let remove = async {
            assert!(eventually(SETTLE, || seen(&world.server, "tools/call").len() == 1).await);
            fleet
                .apply(Vec::<(String, ServerSpec)>::new())
                .await
                .unwrap()
        };
        let (called, report) = tokio::join!(call, remove);
        assert_eq!(report.stopped, ["a"]);
        let error = called.unwrap_err();
        assert!(error.is_closed(), "{error:?}");
        assert!(
            error.to_string().contains("may or may not have run"),
            "{error}"
        );
        // Its session was DELETEd before apply returned; nothing after.
        let log = assert_each_session_deleted_once(&world.server, "removed").await;
        assert_eq!(log.len(), 1);
        let seen_then = ours(&world.server).len();
        mcp_scoped_http::shutdown().await;
        assert!(fleet.catalog().servers.is_empty());
        assert_eq!(ours(&world.server).len(), seen_then);
        finish(fleet, &world, &[], "removed").await;
    });
}

#[test]
fn shutdown_and_drop_release_everything_in_every_era() {
    scenario(async {
        for eras in [Eras::Streamable2025, Eras::Modern, Eras::HttpSse] {
            for drop_it in [false, true] {
                let world = World::new(
                    ServerConfig::default()
                        .with_eras(eras)
                        .with_listen(ListenMode::Open),
                )
                .await;
                let fleet = fleet();
                fleet
                    .apply([
                        ("owned", spec(&world.server).listen(true)),
                        (
                            "lent",
                            spec(&world.server)
                                .client(world.caller.client.clone())
                                .listen(true),
                        ),
                    ])
                    .await
                    .unwrap();
                let context = format!("{eras:?}, dropped: {drop_it}");
                assert!(
                    eventually(SETTLE, || fleet.states().values().all(SlotState::is_ready)).await,
                    "{context}: {:?}",
                    fleet.states()
                );
                assert_eq!(fleet.catalog().tool_count(), 6, "{context}");
                fleet
                    .call_tool("lent", "tool-000", json!({}))
                    .await
                    .unwrap();
                if drop_it {
                    drop(fleet);
                } else {
                    let report = fleet.shutdown().await;
                    assert!(
                        report
                            .servers
                            .values()
                            .all(|s| matches!(s, ServerShutdown::Closed(_))),
                        "{context}: {report:?}"
                    );
                }
                mcp_scoped_http::shutdown().await;
                // Only 2025 sessions are DELETEd; an HTTP+SSE session ends
                // when its stream closes; 2026-07-28 has none.
                let deletes = if eras == Eras::HttpSse {
                    let ended = || {
                        let log = world.server.session_log();
                        log.len() == 2 && log.iter().all(|r| !r.live && r.stream_closed)
                    };
                    assert!(eventually(SETTLE, ended).await, "{context}");
                    0
                } else {
                    deletes_owed(&assert_each_session_deleted_once(&world.server, &context).await)
                };
                world.baseline.check(&world.server, deletes).await;
            }
        }
    });
}

#[test]
fn a_changed_list_reaches_the_catalog() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_listen(ListenMode::Open)).await;
        // No health checks: the notification alone brings the change.
        let fleet = fleet();
        let mut events = fleet.events();
        fleet
            .apply([("a", spec(&world.server).listen(true))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let before = fleet.catalog();
        assert_eq!(before.tool_count(), 3);
        world.server.set_tools(5);
        // Announced once the session's listener is up to hear it.
        assert!(eventually(SETTLE, || world.server.list_changed("tools") > 0).await);
        assert!(eventually(SETTLE, || fleet.catalog().tool_count() == 5).await);
        assert!(fleet.catalog().generation > before.generation);
        let mut last = None;
        while let Ok(event) = events.try_recv() {
            if let FleetEvent::Catalog {
                generation, tools, ..
            } = event
            {
                last = Some((generation, tools));
            }
        }
        assert_eq!(last, Some((fleet.catalog().generation, 5)));
        finish(fleet, &world, &[], "list changed").await;
    });
}

/// A renewal (the server expired the session; the next call opened a new
/// one) is announced once, naming the server, the session it replaced and
/// the new one, and the era, with no health check and no notification to
/// wake the slot; the slot stays ready. Its lists, listed again the same,
/// are no change: no catalog event, the generation kept. Before, the
/// fleet said nothing of the renewal, and bumped the generation for the
/// same lists. What the server said about itself is the fleet's to give
/// (`Fleet::info`) while ready, and the renewal carries the new session's.
#[test]
fn a_renewal_is_announced_once_and_its_same_lists_are_no_change() {
    scenario(async {
        let world = World::new(
            ServerConfig::default()
                .with_server_name("renewing")
                .with_instructions("Call tool-000 first."),
        )
        .await;
        let fleet = fleet();
        assert!(fleet.info("a").is_none(), "no slot, no info");
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let first = fleet.info("a").expect("ready: the session's info");
        assert_eq!(first.server_info["name"], "renewing");
        assert_eq!(first.instructions.as_deref(), Some("Call tool-000 first."));
        assert!(first.capabilities["tools"].is_object(), "{first:?}");
        assert_eq!(
            first.protocol_version,
            mcp_scoped_http::ProtocolVersion::LATEST
        );
        assert!(fleet.info("nobody").is_none());
        let before = fleet.catalog();
        let lists = seen(&world.server, "tools/list").len();
        let mut events = fleet.events();
        world.server.expire_sessions();
        fleet
            .call_tool("a", "tool-000", json!({}))
            .await
            .expect("sent again on the new session");
        let log = world.server.session_log();
        assert_eq!(log.len(), 2);
        let event = loop {
            match tokio::time::timeout(SETTLE, events.recv()).await {
                Ok(Ok(event @ FleetEvent::Renewed { .. })) => break event,
                Ok(Ok(FleetEvent::State { .. })) => {}
                other => panic!("no renewal: {other:?}"),
            }
        };
        let FleetEvent::Renewed {
            server,
            old_session_id: old,
            new_session_id: new,
            era,
            info,
            ..
        } = &event
        else {
            unreachable!("matched above")
        };
        // The new session's, as the fleet gives it from now on.
        assert_eq!(info.protocol_version, *era);
        assert_eq!(info.server_info["name"], "renewing");
        assert_eq!(info.instructions.as_deref(), Some("Call tool-000 first."));
        assert!(std::sync::Arc::ptr_eq(info, &fleet.info("a").unwrap()));
        assert_eq!(&**server, "a");
        assert_eq!(old.as_ref().map(|id| id.expose()), Some(&*log[0].id));
        assert_eq!(new.as_ref().map(|id| id.expose()), Some(&*log[1].id));
        assert_eq!(*era, mcp_scoped_http::ProtocolVersion::LATEST);
        // The ids stay credentials in the event.
        let shown = format!("{event:?}");
        assert!(!shown.contains(&*log[0].id), "{shown}");
        assert!(!shown.contains(&*log[1].id), "{shown}");

        // The lists, listed again, reach the catalog (the session's, in
        // place of the old ones) unannounced.
        assert!(
            eventually(SETTLE, || {
                seen(&world.server, "tools/list").len() > lists
                    && !std::sync::Arc::ptr_eq(&fleet.catalog().servers["a"], &before.servers["a"])
            })
            .await,
            "the lists were never listed again"
        );
        assert_eq!(fleet.catalog().generation, before.generation);
        assert!(is(&fleet, "a", "ready"), "a renewal is no loss");
        let report = fleet.shutdown().await;
        assert!(matches!(report.servers["a"], ServerShutdown::Closed(_)));
        assert!(fleet.info("a").is_none(), "stopped: no info");
        // Up to the end: one renewal, and only the catalog's last change.
        let mut rest = Vec::new();
        loop {
            match events.recv().await {
                Ok(FleetEvent::State { .. }) => {}
                Ok(event) => rest.push(event),
                Err(RecvError::Closed) => break,
                Err(RecvError::Lagged(n)) => panic!("lost {n} events"),
            }
        }
        assert!(
            matches!(&rest[..], [FleetEvent::Catalog { generation, tools: 0, .. }]
                if *generation == before.generation + 1),
            "{rest:?}"
        );
        drop(fleet);
        mcp_scoped_http::shutdown().await;
        let log = assert_each_session_deleted_once(&world.server, "renewal").await;
        world
            .baseline
            .check(&world.server, deletes_owed(&log))
            .await;
    });
}

/// An invalid spec (what the config loader makes of a bad entry) is a
/// slot `failed` at once with its reason, as a builder error, and stays
/// so after a reconnect, while a good server beside it is ready; it never
/// reaches any server.
#[test]
fn an_invalid_spec_fails_alone_and_never_connects() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let reason = "server `bad`: `url`: the variable `NOPE` is not set";
        fleet
            .apply([
                ("good", spec(&world.server)),
                ("bad", ServerSpec::invalid(reason)),
            ])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "good", "ready")).await);
        assert!(eventually(SETTLE, || is(&fleet, "bad", "failed")).await);
        let state = fleet.state("bad").unwrap();
        let error = state.error().unwrap();
        assert!(error.is_builder(), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!("invalid configuration: {reason}")
        );
        fleet.reconnect("bad").unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "bad", "failed")).await);
        // The same reason is the same server: apply leaves the slot alone.
        let report = fleet
            .apply([
                ("good", spec(&world.server)),
                ("bad", ServerSpec::invalid(reason)),
            ])
            .await
            .unwrap();
        assert_eq!(report.unchanged, ["bad", "good"]);
        assert_eq!(world.server.stats().sessions_created, 1);
        finish(fleet, &world, &[], "invalid spec").await;
    });
}

/// Tool names a model refuses (a dot, a space, 200 characters, two that
/// clean to the same text) get qualified names every LLM API takes,
/// distinct, and `call_qualified` sends each call to the server under the
/// tool's own name.
#[test]
fn hostile_tool_names_get_model_safe_names_that_route_back() {
    scenario(async {
        let schema = json!({"type": "object"});
        let long = "x".repeat(200);
        let world = World::new(ServerConfig::default()).await;
        world.server.push_fault(tools_answer(json!([
            {"name": "files.read", "inputSchema": schema},
            {"name": "files read", "inputSchema": schema},
            {"name": "files_read", "inputSchema": schema},
            {"name": long, "inputSchema": schema},
        ])));
        let fleet = fleet();
        fleet.apply([("docs", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "docs", "ready")).await);
        let catalog = fleet.catalog();
        let mut names = std::collections::HashSet::new();
        for tool in catalog.tools() {
            let qualified = tool.qualified_name().unwrap();
            assert!(
                (1..=64).contains(&qualified.len())
                    && qualified
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{qualified}"
            );
            assert!(names.insert(qualified.clone()), "{qualified} twice");
            assert_eq!(
                catalog.tool(&qualified).unwrap().name(),
                tool.name(),
                "{qualified} finds its own tool"
            );
        }
        assert_eq!(names.len(), 4);
        assert!(names.contains("docs__files_read"));
        for original in ["files.read", "files read", long.as_str()] {
            let qualified = mcp_scoped_http::fleet::qualify("docs", original);
            // The test kit refuses tools it does not have: the name sent
            // is what counts.
            let _ = fleet.call_qualified(&qualified, json!({})).await;
            let sent = seen(&world.server, "tools/call").pop().unwrap();
            assert_eq!(
                sent.body.as_ref().unwrap()["params"]["name"],
                original,
                "{qualified}"
            );
        }
        finish(fleet, &world, &[], "hostile tool names").await;
    });
}

/// `tools/list` answers these tools (a fault: the test kit's own tools
/// only grow and shrink at the end).
fn tools_answer(tools: serde_json::Value) -> Fault {
    let body = json!({"jsonrpc": "2.0", "id": "ID", "result": {"tools": tools}})
        .to_string()
        .replace("\"ID\"", "{id}");
    Fault::on_rpc(
        "tools/list",
        FaultAction::raw(200, "application/json", &body),
    )
}

/// A catalog event: generation, server, tools added, removed, changed.
type CatalogSeen = (u64, String, Vec<String>, Vec<String>, Vec<String>);

/// The catalog events up to now.
fn drain_catalog(events: &mut tokio::sync::broadcast::Receiver<FleetEvent>) -> Vec<CatalogSeen> {
    let mut seen = Vec::new();
    loop {
        match events.try_recv() {
            Ok(FleetEvent::Catalog {
                generation,
                server,
                changes,
                ..
            }) => seen.push((
                generation,
                server.to_string(),
                changes.tools.added.clone(),
                changes.tools.removed.clone(),
                changes.tools.changed.clone(),
            )),
            Ok(_) => {}
            Err(TryRecvError::Empty | TryRecvError::Closed) => return seen,
            Err(TryRecvError::Lagged(n)) => panic!("lost {n} events"),
        }
    }
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// A catalog event says what changed, by qualified name: all added when
/// the server becomes ready, all removed when it stops, and for a list
/// listed again, exactly the tools gained, lost and changed (the same
/// JSON written otherwise is no change). A list listed again the same is
/// no event at all, and keeps the generation: before, every re-listing
/// was one, with only a generation and a count.
#[test]
fn a_catalog_event_names_what_changed_and_a_list_the_same_is_none() {
    scenario(async {
        let schema = json!({"type": "object"});
        let world = World::new(
            ServerConfig::default()
                .with_listen(ListenMode::Open)
                .with_fault(tools_answer(json!([
                    {"name": "keep", "inputSchema": schema},
                    {"name": "lose", "inputSchema": schema},
                    {"name": "edit", "description": "one", "inputSchema": schema},
                ]))),
        )
        .await;
        let fleet = fleet();
        let mut events = fleet.events();
        fleet
            .apply([("a", spec(&world.server).listen(true))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let ready = drain_catalog(&mut events);
        assert_eq!(
            ready,
            [(
                1,
                "a".to_owned(),
                names(&["a__keep", "a__lose", "a__edit"]),
                vec![],
                vec![]
            )]
        );
        let before = fleet.catalog();

        // The same list again: the catalog holds the new listing, and
        // nobody is told.
        let lists = seen(&world.server, "tools/list").len();
        assert!(eventually(SETTLE, || world.server.list_changed("tools") > 0).await);
        assert!(
            eventually(SETTLE, || {
                seen(&world.server, "tools/list").len() > lists
                    && !std::sync::Arc::ptr_eq(&fleet.catalog().servers["a"], &before.servers["a"])
            })
            .await,
            "the list was never listed again"
        );
        assert_eq!(fleet.catalog().generation, before.generation);
        assert_eq!(drain_catalog(&mut events), []);

        // One gained, one lost, one changed; `keep` written otherwise.
        world.server.clear_faults();
        world.server.push_fault(tools_answer(json!([
            {"inputSchema": schema, "name": "keep"},
            {"name": "edit", "description": "two", "inputSchema": schema},
            {"name": "gain", "inputSchema": schema},
        ])));
        assert!(world.server.list_changed("tools") > 0);
        assert!(
            eventually(SETTLE, || fleet.catalog().generation > before.generation).await,
            "the change never reached the catalog"
        );
        assert!(fleet.catalog().tool("a__gain").is_some());
        assert_eq!(
            drain_catalog(&mut events),
            [(
                before.generation + 1,
                "a".to_owned(),
                names(&["a__gain"]),
                names(&["a__lose"]),
                names(&["a__edit"])
            )]
        );

        // Stopped: all removed.
        fleet
            .apply(Vec::<(String, ServerSpec)>::new())
            .await
            .unwrap();
        assert_eq!(
            drain_catalog(&mut events),
            [(
                before.generation + 2,
                "a".to_owned(),
                vec![],
                names(&["a__keep", "a__edit", "a__gain"]),
                vec![]
            )]
        );
        finish(fleet, &world, &[], "catalog changes").await;
    });
}

/// A list the session re-listed without any notification (2026-07-28: a
/// `HeaderMismatch` to a tool call re-lists the tools) is in the fleet's
/// catalog as soon as the call returns, give or take the slot's wakeup:
/// the slot follows the session's catalog events, not notifications
/// polled for.
#[test]
fn a_list_re_listed_without_a_notification_reaches_the_catalog_at_once() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_eras(Eras::Modern)).await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let before = fleet.catalog();
        assert_eq!(before.tool_count(), 3);
        world.server.set_tools(5);
        world
            .server
            .push_fault(Fault::on_rpc("tools/call", FaultAction::HeaderMismatch).times(1));
        fleet
            .call_tool("a", "tool-000", json!({}))
            .await
            .expect("sent again after the re-listing");
        assert!(
            eventually(Duration::from_secs(1), || fleet.catalog().tool_count() == 5).await,
            "the re-listed tools never reached the catalog"
        );
        assert!(fleet.catalog().generation > before.generation);
        finish(fleet, &world, &[], "re-listed").await;
    });
}

#[test]
fn a_host_config_file_runs_its_http_and_stdio_servers() {
    scenario(async {
        let legacy = TestServer::start(ServerConfig::default().with_eras(Eras::HttpSse));
        let world = World::new(ServerConfig::default()).await;
        let config = json!({"mcpServers": {
            "search": {"url": world.server.url(), "type": "http", "required": true,
                       "headers": {"X-Team": "blue"}, "autoApprove": []},
            "legacy": {"url": legacy.url(), "type": "sse", "required": true},
            "local": {"command": "python3", "args": ["-u", concat!(env!("CARGO_MANIFEST_DIR"),
                      "/tests/it/support/stdio_server.py"), "--era", "legacy"]},
        }});
        let loaded = mcp_scoped_http::fleet::parse_mcp_servers(&config.to_string()).unwrap();
        assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
        assert_eq!(
            loaded.warnings,
            ["server `search`: unknown key `autoApprove` ignored"]
        );
        let fleet = fleet();
        let report = fleet.apply(loaded.servers).await.unwrap();
        assert_eq!(report.started, ["legacy", "local", "search"]);
        fleet.ready(SETTLE).await.unwrap();
        fleet
            .call_tool("legacy", "tool-000", json!({}))
            .await
            .unwrap();
        fleet
            .call_tool("search", "tool-000", json!({}))
            .await
            .unwrap();
        // The stdio entry, a child process of the fleet's.
        while fleet.state("local").is_none_or(|s| s.name() != "ready") {
            assert!(
                matches!(
                    fleet.state("local"),
                    Some(mcp_scoped_http::fleet::SlotState::Starting)
                ),
                "{:?}",
                fleet.state("local")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let echoed = fleet
            .call_tool("local", "echo", json!({"text": "from the file"}))
            .await
            .unwrap();
        assert_eq!(echoed["content"][0]["text"], "from the file");
        let call = seen(&world.server, "tools/call").pop().unwrap();
        assert_eq!(call.header("x-team"), Some("blue"));
        finish(fleet, &world, &[], "config").await;
        drop(legacy);
    });
}

#[test]
fn a_lent_session_survives_the_fleet() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        // The caller's own session, made with its own tools.
        let wire = wire(world.caller.client.clone(), &world.server);
        handshake(&wire).await;
        let id = wire.session_id().expect("a session id");
        let attach = mcp_scoped_http::Connector::new(world.server.url())
            .client(world.caller.client.clone())
            .attach(id, mcp_scoped_http::ProtocolVersion::LATEST);
        let fleet = fleet();
        fleet
            .apply([("mine", ServerSpec::from_connector(attach).required(true))])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.unwrap();
        fleet
            .call_tool("mine", "tool-000", json!({}))
            .await
            .unwrap();
        // Reconnected (attached again: no initialize), then shut down.
        fleet.reconnect("mine").unwrap();
        assert!(
            eventually(SETTLE, || is(&fleet, "mine", "starting")
                || is(&fleet, "mine", "ready"))
            .await
        );
        fleet.ready(SETTLE).await.unwrap();
        fleet.shutdown().await;
        drop(fleet);
        mcp_scoped_http::shutdown().await;
        assert_eq!(world.server.stats().sessions_created, 1);
        assert_eq!(world.server.stats().deletes, 0);
        // Still the caller's, still alive.
        let answer = wire
            .request(request(7, "tools/list", None))
            .await
            .expect("the caller's session works");
        assert!(answer.result["tools"].is_array());
        wire.delete_session()
            .await
            .expect("the caller ends its own session");
        world.baseline.check(&world.server, 1).await;
    });
}

#[test]
fn concurrent_applies_are_serialized_each_whole() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let first = fleet.apply([("a", spec(&world.server)), ("b", spec(&world.server))]);
        let second = fleet.apply([("b", spec(&world.server)), ("c", spec(&world.server))]);
        let (first, second) = tokio::join!(first, second);
        let (first, second) = (first.unwrap(), second.unwrap());
        assert_eq!(first.started, ["a", "b"]);
        assert_eq!(second.stopped, ["a"]);
        assert_eq!(second.unchanged, ["b"]);
        assert_eq!(second.started, ["c"]);
        assert_eq!(fleet.states().keys().collect::<Vec<_>>(), ["b", "c"]);
        finish(fleet, &world, &[], "concurrent applies").await;
    });
}

#[test]
fn a_caller_may_wait_for_a_server_to_be_ready() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        take_down(&world.server);
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || attempt(&fleet, "a") >= 1).await);
        // Not ready: at once by default, after the wait when asked.
        let error = fleet
            .call_tool("a", "tool-000", json!({}))
            .await
            .unwrap_err();
        assert!(error.is_closed(), "{error}");
        let error = fleet
            .call_tool_waiting("a", "tool-000", json!({}), 20 * MS)
            .await
            .unwrap_err();
        assert!(
            error.is_timeout() && error.to_string().contains("`a` not ready"),
            "{error}"
        );
        // Back while a caller waits: its call goes through.
        let call = fleet.call_tool_waiting("a", "tool-000", json!({}), SETTLE);
        let heal = async {
            assert!(eventually(SETTLE, || attempt(&fleet, "a") >= 2).await);
            world.server.clear_faults();
        };
        let (answer, ()) = tokio::join!(call, heal);
        assert_eq!(answer.unwrap()["structuredContent"]["tool"], "tool-000");
        assert_eq!(seen(&world.server, "tools/call").len(), 1);
        finish(fleet, &world, &[], "waiting caller").await;
    });
}

/// A bounded storm: servers go down and come back, slow down, refuse; the
/// set changes (a server disabled and enabled, another replaced); calls
/// run from several tasks all along. Afterwards nothing is left, every
/// session is DELETEd once, and no call reached a server twice.
#[test]
fn chaos_leaves_nothing_behind_and_never_sends_a_call_twice() {
    scenario(async {
        let other = TestServer::start(ServerConfig::default());
        let world = World::new(ServerConfig::default()).await;
        let fleet = std::sync::Arc::new(
            Fleet::builder()
                .backoff(Backoff::new(2 * MS, 20 * MS))
                .health_interval(Some(10 * MS))
                .health_timeout(Duration::from_millis(200))
                .build(),
        );
        let desired = |token: &str, b_enabled: bool| {
            vec![
                (
                    "a",
                    spec(&world.server)
                        .client(world.caller.client.clone())
                        .bearer(token),
                ),
                ("b", spec(&other).enabled(b_enabled)),
                ("c", spec(&world.server)),
            ]
        };
        fleet.apply(desired("t0", true)).await.unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let next_id = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut callers = tokio::task::JoinSet::new();
        for server in ["a", "b", "c", "a"] {
            let (fleet, stop, next_id) = (fleet.clone(), stop.clone(), next_id.clone());
            callers.spawn(async move {
                let mut ok = 0;
                while !stop.is_cancelled() {
                    let id = next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let call = fleet.call_tool(server, "tool-000", json!({"id": id}));
                    match tokio::time::timeout(Duration::from_secs(2), call).await {
                        Ok(Ok(_)) => ok += 1,
                        Ok(Err(_)) => tokio::time::sleep(MS).await,
                        Err(_) => panic!("a call to `{server}` took more than 2 s"),
                    }
                }
                ok
            });
        }
        // A small deterministic generator: the same storm every run.
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut roll = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let servers = [&world.server, &other];
        for step in 0..150 {
            let server = servers[roll(2) as usize];
            match roll(8) {
                0 => take_down(server),
                1 => server.push_fault(
                    Fault::on_http(http::Method::POST, FaultAction::status(503)).times(3),
                ),
                2 => server
                    .push_fault(Fault::on_rpc("tools/call", FaultAction::Delay(20 * MS)).times(2)),
                3 | 4 => server.clear_faults(),
                5 => {
                    fleet
                        .apply(desired(&format!("t{step}"), roll(2) == 0))
                        .await
                        .unwrap();
                }
                6 => {
                    let _ = fleet.reconnect(["a", "b", "c"][roll(3) as usize]);
                }
                _ => {}
            }
            tokio::time::sleep(5 * MS).await;
        }
        world.server.clear_faults();
        other.clear_faults();
        fleet.apply(desired("end", true)).await.unwrap();
        fleet.ready(SETTLE).await.unwrap();
        assert!(
            eventually(SETTLE, || fleet.states().values().all(SlotState::is_ready)).await,
            "{:?}",
            fleet.states()
        );
        stop.cancel();
        let mut succeeded = 0;
        while let Some(done) = callers.join_next().await {
            succeeded += done.unwrap();
        }
        assert!(succeeded > 0);
        // Every call reached a server at most once.
        for server in servers {
            let mut ids: Vec<u64> = seen(server, "tools/call")
                .iter()
                .filter_map(|r| r.params()?["arguments"]["id"].as_u64())
                .collect();
            let all = ids.len();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), all, "a call was sent twice");
        }
        let fleet = std::sync::Arc::into_inner(fleet).expect("the callers are done");
        finish(fleet, &world, &[&other], "chaos").await;
    });
}

// Cancellation: the futures of apply, ready, call_tool and shutdown,
// dropped after every number of polls.

/// Far above the polls any of these takes here.
const MAX_POLLS: usize = 500;

/// A server on which every step pends at least once.
fn slow_config() -> ServerConfig {
    let delay = |method: &str| Fault::on_rpc(method, FaultAction::Delay(MS));
    ServerConfig::default().with_faults(vec![
        delay("initialize"),
        delay("notifications/initialized"),
        delay("tools/list"),
        delay("tools/call"),
        delay("ping"),
        Fault::on_http(http::Method::DELETE, FaultAction::Delay(MS)),
    ])
}

async fn settled(world: &World, context: &str) {
    mcp_scoped_http::shutdown().await;
    let log = assert_each_session_deleted_once(&world.server, context).await;
    world
        .baseline
        .check(&world.server, deletes_owed(&log))
        .await;
}

/// Runs `step` with a drop after 0, 1, 2... polls until it completes.
async fn every_drop_point<F, Fut>(world: &World, what: &str, mut step: F)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for polls in 0..MAX_POLLS {
        let completed = step(polls).await;
        settled(world, &format!("{what} dropped after {polls} polls")).await;
        if completed {
            eprintln!("{what}: completed after {polls} polls");
            return;
        }
    }
    panic!("{what} never completed within {MAX_POLLS} polls");
}

#[test]
fn dropping_apply_after_any_number_of_polls_leaves_nothing_behind() {
    scenario(async {
        let world = World::new(slow_config()).await;
        let url = world.server.url();
        let lent = world.caller.client.clone();
        every_drop_point(&world, "apply", |polls| {
            let fleet = fleet();
            let (url, lent) = (url.clone(), lent.clone());
            async move {
                let spec = |token: &str| {
                    ServerSpec::new(&url)
                        .client(lent.clone())
                        .bearer(token)
                        .delete_timeout(500 * MS)
                };
                fleet.apply([("a", spec("1"))]).await.unwrap();
                assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
                // A replace: stop one (its DELETE), start one.
                let done = poll_at_most(fleet.apply([("a", spec("2"))]), polls)
                    .await
                    .is_some();
                fleet.shutdown().await;
                done
            }
        })
        .await;
    });
}

#[test]
fn dropping_ready_after_any_number_of_polls_leaves_nothing_behind() {
    scenario(async {
        let world = World::new(slow_config()).await;
        let url = world.server.url();
        every_drop_point(&world, "ready", |polls| {
            let fleet = fleet();
            let url = url.clone();
            async move {
                let spec = ServerSpec::new(&url)
                    .required(true)
                    .delete_timeout(500 * MS);
                fleet.apply([("a", spec)]).await.unwrap();
                let done = poll_at_most(fleet.ready(SETTLE), polls).await.is_some();
                drop(fleet);
                done
            }
        })
        .await;
    });
}

#[test]
fn dropping_call_tool_after_any_number_of_polls_leaves_nothing_behind() {
    scenario(async {
        let world = World::new(slow_config()).await;
        let url = world.server.url();
        let fleet = fleet();
        fleet
            .apply([("a", ServerSpec::new(&url).delete_timeout(500 * MS))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let mut completed = false;
        for polls in 0..MAX_POLLS {
            let call = fleet.call_tool("a", "tool-000", json!({"text": "x"}));
            if let Some(result) = poll_at_most(call, polls).await {
                result.unwrap();
                completed = true;
                break;
            }
            // A dropped call is a cancelled request, not a lost session.
            assert!(is(&fleet, "a", "ready"), "{:?}", fleet.state("a"));
        }
        assert!(completed);
        assert_eq!(world.server.stats().sessions_created, 1);
        finish(fleet, &world, &[], "call_tool dropped").await;
    });
}

#[test]
fn dropping_shutdown_after_any_number_of_polls_leaves_nothing_behind() {
    scenario(async {
        let dead = refused_url();
        let world = World::new(slow_config()).await;
        let url = world.server.url();
        let lent = world.caller.client.clone();
        every_drop_point(&world, "shutdown", |polls| {
            let fleet = fleet();
            let (url, lent, dead) = (url.clone(), lent.clone(), dead.clone());
            async move {
                fleet
                    .apply([
                        ("a", ServerSpec::new(&url).delete_timeout(500 * MS)),
                        (
                            "b",
                            ServerSpec::new(&url).client(lent).delete_timeout(500 * MS),
                        ),
                        ("down", ServerSpec::new(&dead)),
                    ])
                    .await
                    .unwrap();
                assert!(
                    eventually(SETTLE, || is(&fleet, "a", "ready")
                        && is(&fleet, "b", "ready"))
                    .await
                );
                let done = match poll_at_most(fleet.shutdown(), polls).await {
                    Some(report) => {
                        assert_eq!(report.servers.len(), 3);
                        assert!(matches!(report.servers["a"], ServerShutdown::Closed(_)));
                        true
                    }
                    None => false,
                };
                drop(fleet);
                done
            }
        })
        .await;
    });
}

/// Issue 26 (review): a slot whose task a shutdown aborts at its deadline
/// (here: its cancelled connect waits for a DELETE the server never
/// answers) never says `stopped`; a `call_tool_waiting` with no bound, or
/// a `ready` with none, waited on its state for ever. They end with the
/// slot's task.
#[test]
fn an_unbounded_wait_ends_when_a_shutdown_aborts_the_slot() {
    scenario(async {
        let server = TestServer::start(
            ServerConfig::default()
                .with_fault(Fault::on_rpc(
                    "notifications/initialized",
                    FaultAction::HangDeaf,
                ))
                .with_fault(Fault::on_http(http::Method::DELETE, FaultAction::HangDeaf)),
        );
        let fleet = std::sync::Arc::new(
            Fleet::builder()
                .backoff(Backoff::new(5 * MS, 50 * MS))
                .health_interval(None)
                .shutdown_timeout(100 * MS)
                .build(),
        );
        fleet
            .apply([(
                "stuck",
                spec(&server)
                    .required(true)
                    .delete_timeout(Duration::from_secs(2)),
            )])
            .await
            .unwrap();
        assert!(
            eventually(SETTLE, || !seen(&server, "notifications/initialized")
                .is_empty())
            .await,
            "the connect reaches its hanging step"
        );
        let waiting = {
            let fleet = fleet.clone();
            tokio::spawn(async move {
                let call = fleet.call_tool_waiting("stuck", "tool-000", json!({}), Duration::MAX);
                let ready = fleet.ready(Duration::MAX);
                tokio::join!(call, ready)
            })
        };
        // The runtime has one thread: a yield lets the waits start (and
        // block on the slot) before the shutdown begins.
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        let report = fleet.shutdown().await;
        assert!(
            matches!(report.servers["stuck"], ServerShutdown::TimedOut),
            "{report:?}"
        );
        // Long before the DELETE's own timeout would end the slot's wait.
        let (call, ready) = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the waits end with the aborted slot")
            .unwrap();
        assert!(call.is_err() && ready.is_err(), "{call:?} {ready:?}");
        drop(fleet);
        mcp_scoped_http::shutdown().await;
    });
}

// Attacks (a hostile review of the fleet).

/// A replaced slot ends after its successor is up (its DELETE is slow):
/// its end must neither take the successor's tools out of the catalog nor
/// announce the server `stopped` after the successor's `ready`. Before,
/// the old slot's last acts (removing its server's catalog entry, the
/// `Stopped` event) were by name, and hit the new slot.
#[test]
fn a_replaced_slot_ending_late_leaves_its_successor_in_the_catalog() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_fault(Fault::on_http(
            http::Method::DELETE,
            FaultAction::Delay(400 * MS),
        )))
        .await;
        let fleet = fleet();
        fleet
            .apply([("a", spec(&world.server).bearer("1"))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let mut events = fleet.events();
        let report = fleet
            .apply([("a", spec(&world.server).bearer("2"))])
            .await
            .unwrap();
        assert_eq!(report.replaced, ["a"]);
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        // The successor was up before its predecessor's DELETE ended.
        assert!(
            fleet.catalog().tool("a__tool-000").is_some(),
            "the ready server's tools are gone from the catalog: {:?}",
            fleet.catalog()
        );
        let mut last = None;
        while let Ok(event) = events.try_recv() {
            if let FleetEvent::State { server, state, .. } = event {
                assert_eq!(&*server, "a");
                last = Some(state.name());
            }
        }
        assert_eq!(last, Some("ready"), "the last state announced for `a`");
        finish(fleet, &world, &[], "replaced late").await;
    });
}

/// A server whose session has something to say more often than the health
/// interval (here a `list_changed` every 30 ms, as a chatty or hostile
/// server may) is still pinged every interval: a session lost while
/// events flow is still noticed. Before, every session event started the
/// interval's wait anew, so no health ping was ever sent.
#[test]
fn session_events_do_not_postpone_the_health_check() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_listen(ListenMode::Open)).await;
        let fleet = Fleet::builder()
            .backoff(Backoff::new(5 * MS, 50 * MS))
            .health_interval(Some(150 * MS))
            .health_timeout(SETTLE)
            .shutdown_timeout(SETTLE)
            .build();
        // Re-listed up to every 10 ms (the default, 1 s, would need a far
        // longer interval and test).
        let mut discovery = mcp_scoped_http::Discovery::default();
        discovery.relist_interval = 10 * MS;
        let connector = mcp_scoped_http::Connector::new(world.server.url())
            .listen(true)
            .discovery(discovery)
            .connect_timeout(SETTLE)
            .delete_timeout(500 * MS);
        fleet
            .apply([("a", ServerSpec::from_connector(connector))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        // The proving ping answered, and the listener up to hear changes.
        assert!(eventually(SETTLE, || !seen(&world.server, "ping").is_empty()).await);
        assert!(eventually(SETTLE, || world.server.list_changed("tools") > 0).await);
        let pings = seen(&world.server, "ping").len();
        let storm = Instant::now();
        let mut round = 0;
        while storm.elapsed() < 1500 * MS {
            // A real change each time: the session announces it.
            round += 1;
            world.server.set_tools(3 + round % 2);
            world.server.list_changed("tools");
            tokio::time::sleep(30 * MS).await;
        }
        let during = seen(&world.server, "ping").len() - pings;
        assert!(fleet.catalog().generation > 10, "{:?}", fleet.catalog());
        // About ten intervals passed; a loaded machine may lose a few.
        assert!(
            during >= 3,
            "{during} health pings in 1.5 s at a 150 ms interval"
        );
        assert!(is(&fleet, "a", "ready"));
        finish(fleet, &world, &[], "health under events").await;
    });
}

/// Two shutdowns at once (a signal handler's and `main`'s): the second
/// returns only once the first's drain is done, so a host that exits after
/// either leaves nothing behind. Before, the second said
/// `already_shut_down` at once, while the sessions were still open.
#[test]
fn a_second_shutdown_waits_for_the_first_s_drain() {
    use std::sync::atomic::{AtomicBool, Ordering};

    scenario(async {
        let world = World::new(ServerConfig::default().with_fault(Fault::on_http(
            http::Method::DELETE,
            FaultAction::Delay(200 * MS),
        )))
        .await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let first_done = AtomicBool::new(false);
        let first = async {
            let report = fleet.shutdown().await;
            first_done.store(true, Ordering::SeqCst);
            report
        };
        let second = async {
            let report = fleet.shutdown().await;
            (report.already_shut_down, first_done.load(Ordering::SeqCst))
        };
        let (report, (already, first_was_done)) = tokio::join!(first, second);
        assert!(matches!(report.servers["a"], ServerShutdown::Closed(_)));
        assert!(already);
        assert!(
            first_was_done,
            "the second shutdown returned before the first had drained"
        );
        assert_eq!(world.server.stats().deletes, 1);
        finish(fleet, &world, &[], "two shutdowns").await;
    });
}

/// While a reconnect closes the old session (its DELETE slow), the slot is
/// not `ready`: a caller who chose to wait for it waits, and gets the new
/// session. Before, the slot still said `ready` with no session to route
/// to, so `call_tool_waiting` failed at once with "not ready (ready)".
#[test]
fn a_caller_waiting_during_a_reconnect_gets_the_new_session() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_fault(Fault::on_http(
            http::Method::DELETE,
            FaultAction::Delay(300 * MS),
        )))
        .await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        fleet.reconnect("a").unwrap();
        // The old session has left the slot, and is being closed.
        assert!(eventually(SETTLE, || fleet.catalog().servers.is_empty()).await);
        let result = fleet
            .call_tool_waiting("a", "tool-000", json!({"text": "x"}), SETTLE)
            .await;
        assert!(result.is_ok(), "{:?}", result.err().map(|e| e.to_string()));
        assert_eq!(world.server.stats().sessions_created, 2);
        finish(fleet, &world, &[], "waiting during a reconnect").await;
    });
}

/// A caller waiting for a server that is replaced meanwhile (a reload
/// changed its spec) waits for the new slot, within its own bound. Before,
/// the old slot's stop ended the wait, and the call failed at once with
/// "not ready (starting)".
#[test]
fn a_caller_waiting_for_a_replaced_server_waits_for_its_successor() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        fleet
            .apply([("a", spec(&world.server).bearer("1"))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        take_down(&world.server);
        fleet.reconnect("a").unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "retrying")).await);
        let call = fleet.call_tool_waiting("a", "tool-000", json!({"text": "x"}), SETTLE);
        let reload = async {
            tokio::time::sleep(20 * MS).await;
            let report = fleet
                .apply([("a", spec(&world.server).bearer("2"))])
                .await
                .unwrap();
            assert_eq!(report.replaced, ["a"]);
            world.server.clear_faults();
        };
        let (result, ()) = tokio::join!(call, reload);
        assert!(result.is_ok(), "{:?}", result.err().map(|e| e.to_string()));
        // No bound at all: no overflow either.
        let waited = fleet.call_tool_waiting("a", "tool-000", json!({}), Duration::MAX);
        waited.await.unwrap();
        finish(fleet, &world, &[], "waiting across a replace").await;
    });
}

/// `ready` waiting for a required server that is replaced meanwhile (a
/// reload changed its spec) waits for the new slot. Before, the old slot's
/// stop failed `ready` at once: "required server `a` is stopped".
#[test]
fn ready_follows_a_required_server_replaced_meanwhile() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        take_down(&world.server);
        fleet
            .apply([("a", spec(&world.server).bearer("1").required(true))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "retrying")).await);
        let reload = async {
            tokio::time::sleep(20 * MS).await;
            let report = fleet
                .apply([("a", spec(&world.server).bearer("2").required(true))])
                .await
                .unwrap();
            assert_eq!(report.replaced, ["a"]);
            world.server.clear_faults();
        };
        let (ready, ()) = tokio::join!(fleet.ready(SETTLE), reload);
        assert!(ready.is_ok(), "{:?}", ready.err().map(|e| e.to_string()));
        assert!(is(&fleet, "a", "ready"));
        finish(fleet, &world, &[], "ready across a replace").await;
    });
}

/// After `shutdown`, the fleet's event stream ends (once its last events
/// are read), so a host's reader task ends with the fleet even while the
/// host still holds it. Before, the stream stayed open for good.
#[test]
fn the_event_stream_ends_after_shutdown() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let mut events = fleet.events();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        fleet.shutdown().await;
        let mut stopped = false;
        let ended = tokio::time::timeout(SETTLE, async {
            loop {
                match events.recv().await {
                    Ok(FleetEvent::State { state, .. }) => stopped |= !state.is_ready(),
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "the stream is still open after shutdown");
        assert!(stopped);
        // Asked for after the shutdown: ended at once.
        assert!(matches!(
            fleet.events().try_recv(),
            Err(TryRecvError::Closed)
        ));
        finish(fleet, &world, &[], "events end").await;
    });
}

/// An event capacity too large to allocate is capped (at 65 536), never a
/// panic or an abort: before, `usize::MAX` panicked in tokio's channel and
/// `1 << 40` would have aborted on the allocation.
#[test]
fn a_huge_event_capacity_is_capped() {
    scenario(async {
        for capacity in [usize::MAX, 1 << 40] {
            let fleet = Fleet::builder().event_capacity(capacity).build();
            let mut events = fleet.events();
            fleet
                .apply([("a", ServerSpec::new(refused_url()))])
                .await
                .unwrap();
            let first = tokio::time::timeout(SETTLE, events.recv()).await;
            assert!(
                matches!(first, Ok(Ok(FleetEvent::State { .. }))),
                "{first:?}"
            );
            fleet.shutdown().await;
        }
    });
}

/// A shutdown timeout of `Duration::MAX` ("wait as long as it takes") is
/// no overflow: shutdown and drop drain as usual. Before, adding it to
/// now panicked, in `shutdown` and in the fleet's `Drop`.
#[test]
fn an_unbounded_shutdown_timeout_does_not_overflow() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        for shut_down in [true, false] {
            let fleet = Fleet::builder()
                .health_interval(None)
                .shutdown_timeout(Duration::MAX)
                .build();
            fleet.apply([("a", spec(&world.server))]).await.unwrap();
            assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
            if shut_down {
                let report = fleet.shutdown().await;
                assert!(matches!(report.servers["a"], ServerShutdown::Closed(_)));
            }
            drop(fleet);
            tokio::time::timeout(SETTLE, mcp_scoped_http::shutdown())
                .await
                .expect("the reaper's wait is bounded");
        }
        let log = assert_each_session_deleted_once(&world.server, "max timeout").await;
        world
            .baseline
            .check(&world.server, deletes_owed(&log))
            .await;
    });
}

/// Issue 26 (3): an HTTP+SSE answer over the event limit fails its call
/// with a limit error (it read "the HTTP+SSE stream ended before the
/// response came") and ends the session, which the slot notices at once,
/// with no health checks: it used to stay `ready` with every call failing.
/// A new session replaces it and calls work again.
#[test]
fn an_http_sse_answer_over_the_limit_fails_its_call_and_the_slot_reconnects() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_eras(Eras::HttpSse)).await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let huge = format!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"result":{{"content":[{{"type":"text","text":"{}"}}]}}}}"#,
            "x".repeat(8 * 1024 * 1024)
        );
        world
            .server
            .push_fault(Fault::on_rpc("tools/call", FaultAction::StreamRaw(huge.into())).times(1));
        let error = fleet
            .call_tool("a", "tool-000", json!({}))
            .await
            .expect_err("over the SSE event limit");
        assert!(error.is_limit(), "{error}");
        assert!(
            eventually(SETTLE, || world.server.stats().sessions_created >= 2
                && is(&fleet, "a", "ready"))
            .await,
            "{:?}",
            fleet.states()
        );
        fleet
            .call_tool("a", "tool-000", json!({}))
            .await
            .expect("the new session answers");
        fleet.shutdown().await;
        drop(fleet);
        mcp_scoped_http::shutdown().await;
        // An HTTP+SSE session ends when its stream closes (no DELETE).
        let ended = || {
            let log = world.server.session_log();
            log.len() == 2 && log.iter().all(|r| !r.live && r.stream_closed)
        };
        assert!(
            eventually(SETTLE, ended).await,
            "{:?}",
            world.server.session_log()
        );
        world.baseline.check(&world.server, 0).await;
    });
}

/// `ready` waits for every server to settle, not only the required ones,
/// and says where each is: a slow server is waited for until ready, a
/// dead one until its first connect failed, a hung one is pending when
/// the deadline passes (no error: it is not required). Before, `ready`
/// returned at once when no server was required.
#[test]
fn ready_waits_until_every_server_has_settled_and_says_which_are_ready() {
    scenario(async {
        // Before the world: its baseline counts the server's descriptors.
        let hung = TestServer::start(
            ServerConfig::default().with_fault(Fault::on_rpc("initialize", FaultAction::Hang)),
        );
        let world = World::new(
            ServerConfig::default()
                .with_fault(Fault::on_rpc("initialize", FaultAction::Delay(300 * MS))),
        )
        .await;
        let fleet = fleet();
        fleet
            .apply([
                ("slow", spec(&world.server)),
                ("dead", ServerSpec::new(refused_url())),
            ])
            .await
            .unwrap();
        let readiness = fleet.ready(SETTLE).await.unwrap();
        assert_eq!(readiness.ready, ["slow"], "{readiness:?}");
        assert!(readiness.pending.is_empty(), "{readiness:?}");
        // Its first attempt failed: waiting to retry, or (the test's
        // backoff is 5 to 50 ms, and a loaded machine is slow to look)
        // connecting again already, as `Readiness::not_ready` says.
        assert!(
            matches!(
                readiness.not_ready.get("dead").map(SlotState::name),
                Some("retrying" | "starting")
            ),
            "{readiness:?}"
        );
        assert!(readiness.is_settled() && !readiness.all_ready());

        // A hung server: pending by the deadline, no error.
        fleet
            .apply([
                ("slow", spec(&world.server)),
                ("dead", ServerSpec::new(refused_url())),
                ("hung", spec(&hung).connect_timeout(Duration::from_secs(30))),
            ])
            .await
            .unwrap();
        let started = Instant::now();
        let readiness = fleet.ready(200 * MS).await.unwrap();
        assert!(started.elapsed() < SETTLE, "{:?}", started.elapsed());
        assert_eq!(readiness.pending, ["hung"], "{readiness:?}");
        assert_eq!(readiness.ready, ["slow"], "{readiness:?}");
        assert!(!readiness.is_settled());
        finish(fleet, &world, &[], "ready settles").await;
        drop(hung);
    });
}

/// Per-call options reach the server through the fleet: progress comes to
/// the call's callback, `_meta` is sent, a timeout bounds the call (and
/// the slot stays ready: a timeout is no loss).
#[test]
fn a_fleet_call_carries_its_options() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_response_mode(ResponseMode::Sse)).await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        fleet.ready(SETTLE).await.unwrap();
        let progress = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = progress.clone();
        let options = RequestOptions::default()
            .on_progress(move |p: Progress| into.lock().unwrap().push(p.progress));
        let answer = fleet
            .call_tool_with("a", "tool-000", json!({}), options)
            .await
            .unwrap();
        assert_eq!(answer["structuredContent"]["tool"], "tool-000");
        assert_eq!(*progress.lock().unwrap(), [1.0, 2.0, 3.0]);

        let mut meta = serde_json::Map::new();
        meta.insert("trace".into(), json!("t-1"));
        let params = json!({"name": "tool-001", "arguments": {}});
        fleet
            .request_with(
                "a",
                "tools/call",
                Some(params),
                RequestOptions::default().meta(meta),
            )
            .await
            .unwrap();
        let sent = seen(&world.server, "tools/call");
        assert_eq!(
            sent.last()
                .and_then(|r| r.meta())
                .map(|m| m["trace"].clone()),
            Some(json!("t-1"))
        );

        world.server.push_fault(
            Fault::on_rpc("tools/call", FaultAction::Delay(Duration::from_secs(2))).times(1),
        );
        let error = fleet
            .call_tool_waiting_with(
                "a",
                "tool-000",
                json!({}),
                SETTLE,
                RequestOptions::default().timeout(50 * MS),
            )
            .await
            .unwrap_err();
        assert!(error.is_timeout(), "{error}");
        assert!(is(&fleet, "a", "ready"));
        finish(fleet, &world, &[], "call options").await;
    });
}

/// What the servers say unasked reaches one fleet-wide stream, each
/// message with its server's name: a log message, a list change. A slow
/// reader is told it lagged; the stream ends after shutdown.
#[test]
fn every_server_notification_reaches_the_fleet_s_stream() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_listen(ListenMode::Open)).await;
        let fleet = builder().notification_capacity(4).build();
        let mut notes = fleet.notifications();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        fleet.ready(SETTLE).await.unwrap();
        let log = |text: &str| {
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "info", "data": text}})
        };
        // Once the listening stream is up, a log message comes through.
        assert!(eventually(SETTLE, || world.server.notify_listeners(&log("hello")) > 0).await);
        let first = tokio::time::timeout(SETTLE, notes.recv())
            .await
            .expect("a notification within the bound")
            .unwrap();
        assert_eq!(&*first.server, "a");
        assert_eq!(first.method(), "notifications/message");
        assert_eq!(first.params().unwrap()["data"], "hello");
        // Drain the repeats of the wait above, then a list change.
        while notes.try_recv().is_ok() {}
        assert_eq!(world.server.list_changed("tools"), 1);
        let changed = tokio::time::timeout(SETTLE, async {
            loop {
                let note = notes.recv().await.unwrap();
                if note.method() != "notifications/message" {
                    return note;
                }
            }
        })
        .await
        .expect("the list change within the bound");
        assert_eq!(changed.method(), "notifications/tools/list_changed");
        assert_eq!(&*changed.server, "a");
        // A resource that changed, as a host subscribed to it hears.
        let updated = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                             "params": {"uri": "file:///r/000"}});
        assert_eq!(world.server.notify_listeners(&updated), 1);
        let updated = tokio::time::timeout(SETTLE, notes.recv())
            .await
            .expect("the resource update within the bound")
            .unwrap();
        assert_eq!(updated.method(), "notifications/resources/updated");
        assert_eq!(updated.params().unwrap()["uri"], "file:///r/000");
        assert_eq!(&*updated.server, "a");

        // A reader that does not read loses the oldest and is told.
        let mut slow = fleet.notifications();
        for i in 0..10 {
            assert_eq!(world.server.notify_listeners(&log(&format!("n{i}"))), 1);
        }
        let lagged = tokio::time::timeout(SETTLE, async {
            loop {
                match slow.recv().await {
                    Err(RecvError::Lagged(lost)) => return lost,
                    Ok(_) => {}
                    Err(RecvError::Closed) => panic!("closed"),
                }
            }
        })
        .await
        .expect("lagged within the bound");
        assert!(lagged >= 1, "{lagged}");
        assert!(is(&fleet, "a", "ready"));

        fleet.shutdown().await;
        let ended = tokio::time::timeout(SETTLE, async {
            while !matches!(notes.recv().await, Err(RecvError::Closed)) {}
        })
        .await;
        assert!(ended.is_ok(), "the stream is still open after shutdown");
        finish(fleet, &world, &[], "notifications").await;
    });
}

/// A lost listening stream is checked at once: a server gone is noticed
/// within seconds, not at the next health check an hour away.
#[test]
fn a_lost_listener_is_checked_at_once() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_listen(ListenMode::Open)).await;
        let fleet = Fleet::builder()
            .backoff(Backoff::new(
                Duration::from_secs(30),
                Duration::from_secs(60),
            ))
            .health_interval(Some(Duration::from_secs(3600)))
            .health_timeout(SETTLE)
            .shutdown_timeout(SETTLE)
            .build();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        fleet.ready(SETTLE).await.unwrap();
        assert!(eventually(SETTLE, || !seen(&world.server, "ping").is_empty()).await);
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": "bye"}});
        assert!(eventually(SETTLE, || world.server.notify_listeners(&note) > 0).await);
        // Down for MCP, and its listening streams end (each time the
        // listener opens one again, until the slot notices).
        take_down(&world.server);
        let noticed = eventually(SETTLE, || {
            world.server.cut_listeners_after(&note);
            !is(&fleet, "a", "ready")
        })
        .await;
        assert!(noticed, "{:?}", fleet.state("a"));
        assert!(is(&fleet, "a", "retrying"), "{:?}", fleet.state("a"));
        world.server.clear_faults();
        finish(fleet, &world, &[], "listener lost").await;
    });
}

/// Review of issue 28: a listener that flaps (each stream sends one
/// message, so its backoff starts anew, and ends) while the server is
/// healthy: the immediate check of a lost listener is not a ping per
/// flap (one every few hundred milliseconds, for ever), but at most one
/// per `LISTENER_CHECK_GAP` (5 s) on top of the health interval.
#[test]
fn a_flapping_listener_is_no_ping_storm() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_listen(ListenMode::Open)).await;
        let fleet = Fleet::builder()
            .health_interval(Some(Duration::from_secs(3600)))
            .health_timeout(SETTLE)
            .shutdown_timeout(SETTLE)
            .build();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        fleet.ready(SETTLE).await.unwrap();
        assert!(eventually(SETTLE, || !seen(&world.server, "ping").is_empty()).await);
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": "flap"}});
        let before = seen(&world.server, "ping").len();
        let mut flaps = 0;
        let flapping = tokio::time::Instant::now();
        // Load, not a wait: cut each stream the listener opens, for 3 s.
        while flapping.elapsed() < Duration::from_secs(3) {
            flaps += world.server.cut_listeners_after(&note);
            tokio::time::sleep(20 * MS).await;
        }
        assert!(flaps >= 3, "the listener flapped {flaps} times only");
        // The first loss's check, and one the session's start may owe.
        let pings = seen(&world.server, "ping").len() - before;
        assert!(pings <= 2, "{pings} pings for {flaps} flaps");
        assert!(is(&fleet, "a", "ready"));
        finish(fleet, &world, &[], "a flapping listener").await;
    });
}

/// `set_log_level` asks the server's current session (`logging/setLevel`),
/// routed like any request; an unknown server is refused at once.
#[test]
fn set_log_level_reaches_the_server() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        fleet.ready(SETTLE).await.unwrap();
        // The test kit offers no logging: an answer either way.
        let _ = fleet.set_log_level("a", "debug").await;
        let sent = seen(&world.server, "logging/setLevel");
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].params().unwrap()["level"], "debug");
        let error = fleet.set_log_level("b", "debug").await.unwrap_err();
        assert!(error.is_builder(), "{error}");
        assert!(is(&fleet, "a", "ready"));
        finish(fleet, &world, &[], "set_log_level").await;
    });
}

/// `ready` follows a server that is not required to the slot that replaced
/// it (a reload changed its spec): it says where the new slot is, not that
/// the old one stopped.
#[test]
fn ready_follows_any_server_replaced_meanwhile() {
    scenario(async {
        // Before the world: its baseline counts the server's descriptors.
        let slow = TestServer::start(
            ServerConfig::default()
                .with_fault(Fault::on_rpc("initialize", FaultAction::Delay(1500 * MS))),
        );
        let world = World::new(
            ServerConfig::default().with_fault(Fault::on_rpc("initialize", FaultAction::Hang)),
        )
        .await;
        let fleet = fleet();
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        // Replaced by a server that takes a while: the old slot stops (its
        // hung connect reaped within the DELETE timeout, 500 ms) long
        // before the new one is ready.
        let reload = async {
            assert!(eventually(SETTLE, || !seen(&world.server, "initialize").is_empty()).await);
            let report = fleet.apply([("a", spec(&slow))]).await.unwrap();
            assert_eq!(report.replaced, ["a"]);
        };
        let (readiness, ()) = tokio::join!(fleet.ready(SETTLE), reload);
        let readiness = readiness.unwrap();
        assert_eq!(readiness.ready, ["a"], "{readiness:?}");
        finish(
            fleet,
            &world,
            &[&slow],
            "ready across a replace, not required",
        )
        .await;
    });
}

/// Review of issue 28: a required server replaced by one that is not
/// (a reload that changed its URL and dropped `required`) while `ready`
/// waits: the successor is the one to wait for, never "required server
/// `a` is stopped" for the slot the reload retired.
#[test]
fn ready_follows_a_required_server_replaced_by_one_not_required() {
    scenario(async {
        let slow = TestServer::start(
            ServerConfig::default()
                .with_fault(Fault::on_rpc("initialize", FaultAction::Delay(1500 * MS))),
        );
        let world = World::new(
            ServerConfig::default().with_fault(Fault::on_rpc("initialize", FaultAction::Hang)),
        )
        .await;
        let fleet = fleet();
        fleet
            .apply([("a", spec(&world.server).required(true))])
            .await
            .unwrap();
        let reload = async {
            assert!(eventually(SETTLE, || !seen(&world.server, "initialize").is_empty()).await);
            let report = fleet.apply([("a", spec(&slow))]).await.unwrap();
            assert_eq!(report.replaced, ["a"]);
        };
        let (readiness, ()) = tokio::join!(fleet.ready(SETTLE), reload);
        let readiness = readiness.map_err(|e| e.to_string()).unwrap();
        assert_eq!(readiness.ready, ["a"], "{readiness:?}");
        finish(
            fleet,
            &world,
            &[&slow],
            "ready across a replace, required no more",
        )
        .await;
    });
}

/// Issue 28: a `${VAR}` in a config file's header is expanded before it is
/// sent, from the environment the caller gives (never the process's own
/// here): the server that requires the bearer is ready only with it.
#[cfg(feature = "oauth")]
#[test]
fn a_config_header_s_env_reference_reaches_the_server_expanded() {
    use mcp_scoped_http::fleet::parse_mcp_servers_with;
    use mcp_scoped_http_testkit::{AuthConfig, AuthServer};

    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let world = World::new(
            ServerConfig::default()
                .with_tools(2)
                .with_authorization(auth.resource()),
        )
        .await;
        // The test kit issues tokens through the code flow only: one slot
        // with OAuth runs it, and its token is the variable's value.
        let fleet = fleet();
        let flow = ServerSpec::new(world.server.url()).oauth(support::oauth::headless());
        fleet.apply([("flow", flow)]).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "flow", "ready")).await);
        let token = auth.tokens().pop().expect("a token").access_token;
        let config = json!({"mcpServers": {
            "guarded": {"url": world.server.url(), "required": true,
                        "headers": {"Authorization": "Bearer ${TOKEN}"}},
            "wrong": {"url": world.server.url(),
                      "headers": {"Authorization": "Bearer ${WRONG:-not-a-token}"}},
        }})
        .to_string();
        let loaded =
            parse_mcp_servers_with(&config, |name| (name == "TOKEN").then(|| token.clone()))
                .unwrap();
        assert!(!format!("{loaded:?}").contains(&token));
        fleet.apply(loaded.servers).await.unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "guarded", "ready")).await);
        fleet.ready(SETTLE).await.unwrap();
        fleet
            .call_tool("guarded", "tool-000", json!({}))
            .await
            .unwrap();
        // The server does check: the default's token is refused.
        assert!(eventually(SETTLE, || is(&fleet, "wrong", "auth_required")).await);
        finish(fleet, &world, &[], "expanded header").await;
        drop(auth);
    });
}

/// Issue 28: a call to a server the configuration has but does not run
/// says so (disabled), not that there is no such server; one not in the
/// configuration at all is still no such server.
#[test]
fn a_call_to_a_disabled_server_says_it_is_disabled() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        fleet
            .apply([
                ("on", spec(&world.server)),
                ("off", spec(&world.server).enabled(false)),
            ])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.unwrap();
        let error = fleet
            .call_tool("off", "tool-000", json!({}))
            .await
            .unwrap_err();
        assert!(error.is_closed(), "{error:?}");
        assert!(
            error.to_string().contains("server `off` is disabled"),
            "{error}"
        );
        let error = fleet
            .call_tool("nowhere", "tool-000", json!({}))
            .await
            .unwrap_err();
        assert!(error.is_builder(), "{error:?}");
        // In a host's words, without "invalid configuration".
        assert_eq!(error.to_string(), "no server named `nowhere` in the fleet");
        // Enabled again: it runs, and is called.
        fleet
            .apply([("on", spec(&world.server)), ("off", spec(&world.server))])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.unwrap();
        fleet.call_tool("off", "tool-000", json!({})).await.unwrap();
        finish(fleet, &world, &[], "a disabled server").await;
    });
}

/// A sampling result naming the server that asked.
fn sampled_by(server: &str) -> serde_json::Value {
    json!({"role": "assistant", "model": "host", "content": {"type": "text", "text": server}})
}

#[test]
fn http_servers_of_every_era_reach_the_fleet_s_handlers_told_which_server_asks() {
    use mcp_scoped_http::Connector;
    use mcp_scoped_http_testkit::{InputRequest, TestTool};
    scenario(async {
        // Started before the world's baseline is taken.
        let modern = TestServer::start(
            ServerConfig::default()
                .with_eras(Eras::Modern)
                .with_tool(TestTool::input_required("ask", InputRequest::Sampling, 1)),
        );
        let own = TestServer::start(ServerConfig::default());
        let world = World::new(ServerConfig::default()).await;
        let fleet = builder()
            .on_sampling(|server, _params| async move { Ok(sampled_by(&server)) })
            .build();
        // A connector that answers sampling itself keeps its own handler.
        let connector = Connector::new(own.url())
            .bearer("fleet-token")
            .on_sampling(|_| async { Ok(sampled_by("its own")) });
        fleet
            .apply([
                ("legacy", spec(&world.server)),
                (
                    "modern",
                    ServerSpec::new(modern.url()).connect_timeout(SETTLE),
                ),
                ("own", ServerSpec::from_connector(connector)),
            ])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.expect("all ready");

        // 2025: a server request on the call's stream.
        for (server, test_server, answer) in [
            ("legacy", &world.server, "legacy"),
            ("own", &own, "its own"),
        ] {
            test_server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::ServerRequest {
                        method: "sampling/createMessage".into(),
                        params: json!({"messages": [], "maxTokens": 1}),
                    },
                )
                .times(1),
            );
            let result = fleet
                .call_tool(server, "tool-000", json!({}))
                .await
                .unwrap();
            assert_eq!(
                result["structuredContent"]["clientAnswer"],
                sampled_by(answer),
                "{server}"
            );
        }
        // 2026-07-28: an input request, answered and the call sent again.
        let result = fleet.call_tool("modern", "ask", json!({})).await.unwrap();
        assert_ne!(result["isError"], true, "{result}");
        let answered = &result["structuredContent"]["inputResponses"]["sample"];
        assert_eq!(*answered, sampled_by("modern"), "{result}");
        finish(fleet, &world, &[&own], "server requests").await;
    });
}

#[test]
fn filtered_tools_are_neither_listed_nor_called_and_a_new_filter_keeps_the_session() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let mut events = fleet.events();
        fleet
            .apply([("a", spec(&world.server).disabled_tools(["tool-001"]))])
            .await
            .unwrap();
        assert!(eventually(SETTLE, || is(&fleet, "a", "ready")).await);
        let listed = |fleet: &Fleet| -> Vec<String> {
            fleet
                .catalog()
                .tools()
                .filter_map(|t| t.qualified_name())
                .collect()
        };
        assert_eq!(listed(&fleet), ["a__tool-000", "a__tool-002"]);
        assert_eq!(fleet.catalog().tool_count(), 2);

        // Refused every way, and the server never sees it.
        let refusals = [
            fleet
                .call_tool("a", "tool-001", json!({}))
                .await
                .unwrap_err(),
            fleet
                .call_qualified("a__tool-001", json!({}))
                .await
                .unwrap_err(),
            fleet
                .request("a", "tools/call", Some(json!({"name": "tool-001"})))
                .await
                .unwrap_err(),
        ];
        for refused in refusals {
            assert!(refused.is_builder(), "{refused}");
            assert!(refused.to_string().contains("not offered"), "{refused}");
        }
        assert!(seen(&world.server, "tools/call").is_empty());
        fleet.call_tool("a", "tool-000", json!({})).await.unwrap();

        // Only tool-001 now: the same session, the catalog follows at once.
        let report = fleet
            .apply([("a", spec(&world.server).enabled_tools(["tool-001"]))])
            .await
            .unwrap();
        assert_eq!(report.unchanged, ["a"]);
        assert_eq!(listed(&fleet), ["a__tool-001"]);
        fleet.call_tool("a", "tool-001", json!({})).await.unwrap();
        assert!(fleet.call_tool("a", "tool-000", json!({})).await.is_err());
        assert_eq!(world.server.session_log().len(), 1);
        // Announced as a change of the server's lists.
        let mut last = None;
        while let Ok(event) = events.try_recv() {
            if let FleetEvent::Catalog { changes, .. } = event {
                last = Some(changes);
            }
        }
        let last = last.expect("a catalog event");
        assert_eq!(last.tools.added, ["a__tool-001"]);
        assert_eq!(last.tools.removed, ["a__tool-000", "a__tool-002"]);

        // No filter: every tool again.
        fleet.apply([("a", spec(&world.server))]).await.unwrap();
        assert_eq!(listed(&fleet).len(), 3);
        finish(fleet, &world, &[], "tool filters").await;
    });
}

/// A name is the user's: one with spaces and dots runs, and its tools get
/// qualified names a model accepts, which route back to it.
#[test]
fn any_server_name_runs_and_its_tools_route_by_their_model_safe_names() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        fleet
            .apply([
                ("my files.v2", spec(&world.server)),
                ("plain", spec(&world.server)),
            ])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.expect("both ready");
        let catalog = fleet.catalog();
        let names: Vec<String> = catalog
            .tools()
            .filter(|t| t.server == "my files.v2")
            .filter_map(|t| t.qualified_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        for name in &names {
            assert!(name.starts_with("my_files_v2__tool-00"), "{name}");
            assert!(name.len() <= 64);
            let found = catalog.tool(name).expect("found by its name");
            assert_eq!(found.server, "my files.v2");
            let answer = fleet.call_qualified(name, json!({})).await.unwrap();
            assert_eq!(answer["structuredContent"]["tool"], found.name().unwrap());
        }
        fleet
            .call_tool("my files.v2", "tool-001", json!({}))
            .await
            .unwrap();
        finish(fleet, &world, &[], "any name").await;
    });
}

/// Roots changes are told only to servers that have the fleet's roots: a
/// connector that answers roots itself is left alone.
#[test]
fn set_roots_tells_only_the_servers_that_have_the_fleet_s_roots() {
    use mcp_scoped_http::Connector;
    scenario(async {
        let own = TestServer::start(ServerConfig::default());
        let world = World::new(ServerConfig::default()).await;
        let fleet = builder().roots(vec![json!({"uri": "file:///a"})]).build();
        let connector = Connector::new(own.url())
            .bearer("fleet-token")
            .roots(vec![json!({"uri": "file:///its-own"})]);
        fleet
            .apply([
                ("a", spec(&world.server)),
                ("own", ServerSpec::from_connector(connector)),
            ])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.expect("ready");
        let told = fleet
            .set_roots(vec![json!({"uri": "file:///b"})])
            .await
            .unwrap();
        assert_eq!(told, ["a"]);
        let notified = |server: &TestServer| seen(server, "notifications/roots/list_changed").len();
        assert!(eventually(SETTLE, || notified(&world.server) == 1).await);
        assert_eq!(notified(&own), 0);
        finish(fleet, &world, &[&own], "roots told").await;
    });
}

/// A handler that never answers holds nothing for good: the server is
/// told after the session's request timeout, and the call goes on.
#[test]
fn a_handler_that_never_answers_is_cut_at_the_request_timeout() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = dropped.clone();
        let fleet = builder()
            .on_sampling(move |_, _| {
                let guard = scopeguard::guard(flag.clone(), |flag| {
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                });
                async move {
                    let _guard = guard;
                    std::future::pending().await
                }
            })
            .build();
        fleet
            .apply([("a", spec(&world.server).request_timeout(200 * MS))])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.expect("ready");
        world.server.push_fault(
            Fault::on_rpc(
                "tools/call",
                FaultAction::ServerRequest {
                    method: "sampling/createMessage".into(),
                    params: json!({"messages": [], "maxTokens": 1}),
                },
            )
            .times(1),
        );
        // The call itself may take longer than the handler may.
        let options = RequestOptions::default().timeout(SETTLE);
        let result = fleet
            .call_tool_with("a", "tool-000", json!({}), options)
            .await
            .unwrap();
        let answer = &result["structuredContent"]["clientAnswer"];
        assert_eq!(answer["error"]["code"], -32603, "{result}");
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
        finish(fleet, &world, &[], "handler cut").await;
    });
}

/// Names that would share qualified names are refused (in a file: the
/// one not plain fails, the other runs); a changed name routes only
/// through the catalog, never split into another server's.
#[test]
fn names_that_clean_alike_are_refused_and_changed_names_never_split() {
    use mcp_scoped_http::fleet::{parse_mcp_servers, qualify};
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet();
        let clash = fleet
            .apply([
                ("my files", spec(&world.server)),
                ("my_files", spec(&world.server)),
            ])
            .await
            .unwrap_err();
        assert!(clash.is_builder(), "{clash}");
        assert!(
            clash.to_string().contains("`my files` and `my_files`"),
            "{clash}"
        );
        assert!(fleet.states().is_empty());

        let file = json!({"mcpServers": {
            "my files": {"url": world.server.url()},
            "my_files": {"url": world.server.url()},
        }});
        let loaded = parse_mcp_servers(&file.to_string()).unwrap();
        assert!(loaded.servers["my_files"].invalid_reason().is_none());
        let reason = loaded.servers["my files"].invalid_reason().unwrap();
        assert!(reason.contains("rename one"), "{reason}");

        // Not ready (nothing listens): its changed names route nowhere;
        // a plain server's plain names still reach its slot.
        fleet
            .apply([
                ("far away", ServerSpec::new(refused_url())),
                ("near", ServerSpec::new(refused_url())),
            ])
            .await
            .unwrap();
        assert_eq!(fleet.tool_of(&qualify("far away", "read")), None);
        assert_eq!(
            fleet.tool_of("near__read"),
            Some(("near".to_owned(), "read".to_owned()))
        );
        assert_eq!(fleet.tool_of(&qualify("near", "files.read")), None);
        finish(fleet, &world, &[], "clashes").await;
    });
}
