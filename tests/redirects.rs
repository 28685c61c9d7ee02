//! Redirects: same-origin 307/308 are followed with the method and body
//! kept; another origin, and 301/302/303, are refused.

mod support;

use http::Method;
use support::*;

#[tokio::test]
async fn a_same_origin_307_or_308_is_followed_as_a_post() {
    for status in [307u16, 308] {
        for client in clients() {
            let server = TestServer::start(ServerConfig::default());
            let wire = wire(client, &server);
            handshake(&wire).await;
            server.push_fault(
                Fault::on_rpc(
                    "tools/list",
                    FaultAction::Redirect {
                        status,
                        location: "/mcp".into(),
                    },
                )
                .times(1),
            );
            let listed = wire.request(request(2, "tools/list", None)).await.unwrap();
            assert!(listed.result["tools"].is_array());
            let lists = seen(&server, "tools/list");
            assert_eq!(lists.len(), 2, "{} {status}", label(wire.client()));
            for r in &lists {
                assert_eq!(r.method, Method::POST);
                assert!(r.header("mcp-session-id").is_some());
            }
        }
    }
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_nothing_reaches_it() {
    for client in clients() {
        let other = TestServer::start(ServerConfig::default());
        let server = TestServer::start(ServerConfig::default());
        let wire = wire(client, &server);
        handshake(&wire).await;
        server.push_fault(Fault::on_rpc(
            "tools/list",
            FaultAction::Redirect {
                status: 307,
                location: other.url(),
            },
        ));
        let error = wire
            .request(request(2, "tools/list", None))
            .await
            .unwrap_err();
        assert!(error.is_redirect(), "{error}");
        assert!(other.requests().is_empty(), "{}", label(wire.client()));
        assert_eq!(other.stats().connections_accepted, 0);
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(wire.session_id().unwrap().expose()));
    }
}

#[tokio::test]
async fn a_301_302_or_303_never_turns_the_post_into_a_get() {
    for status in [301u16, 302, 303] {
        let server = TestServer::start(ServerConfig::default());
        let wire = wire(HttpClient::owned().unwrap(), &server);
        handshake(&wire).await;
        server.push_fault(Fault::on_rpc(
            "tools/list",
            FaultAction::Redirect {
                status,
                location: "/mcp".into(),
            },
        ));
        let error = wire
            .request(request(2, "tools/list", None))
            .await
            .unwrap_err();
        assert!(error.is_redirect(), "{status}: {error}");
        assert_eq!(error.status().map(|s| s.as_u16()), Some(status));
        assert!(seen_http(&server, Method::GET).is_empty(), "{status}");
        assert_eq!(seen(&server, "tools/list").len(), 1);
    }
}

#[tokio::test]
async fn a_redirect_loop_is_cut_off() {
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    server.push_fault(Fault::on_rpc(
        "tools/list",
        FaultAction::Redirect {
            status: 307,
            location: "/mcp".into(),
        },
    ));
    let error = wire
        .request(request(2, "tools/list", None))
        .await
        .unwrap_err();
    assert!(
        error.is_redirect() && error.to_string().contains("more than 5"),
        "{error}"
    );
    assert_eq!(seen(&server, "tools/list").len(), 6);
}
