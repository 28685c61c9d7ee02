//! Redirects: same-origin 307/308 are followed with the method and body
//! kept; another origin, and 301/302/303, are refused.

use crate::support::*;
use http::Method;

#[tokio::test]
async fn a_same_origin_307_or_308_is_followed_as_a_post() {
    let _shared = crate::support::shared();
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
    let _shared = crate::support::shared();
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
    let _shared = crate::support::shared();
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
    let _shared = crate::support::shared();
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

/// A 307 whose `Location` is missing, not text or not a URL is an error
/// that names the cause and keeps the status, never handed back as if it
/// were the answer. (tower-http's `FollowRedirect` returns such a 307 as an
/// ordinary response without asking its policy: one reason the loop in
/// `src/transport/mod.rs` is our own.) The lent client rewrites the test
/// server's `Location` on the way back.
#[tokio::test]
async fn a_redirect_without_a_usable_location_is_refused_and_says_why() {
    let _shared = crate::support::shared();
    use http::header::LOCATION;
    use tower::ServiceExt as _;

    let cases: [(Option<&'static [u8]>, &str); 3] = [
        (None, "without Location"),
        (Some(b"/\xff"), "not ASCII"),
        (Some(b"http://[::1"), "not a URL"),
    ];
    for (location, cause) in cases {
        let server = TestServer::start(ServerConfig::default());
        let client = HttpClient::borrowed(callers_hyper_client().map_response(
            move |mut response: http::Response<hyper::body::Incoming>| {
                if response.headers().contains_key(LOCATION) {
                    match location {
                        Some(bytes) => {
                            let value = http::HeaderValue::from_bytes(bytes).unwrap();
                            response.headers_mut().insert(LOCATION, value);
                        }
                        None => {
                            response.headers_mut().remove(LOCATION);
                        }
                    }
                }
                response
            },
        ));
        let wire = wire(client, &server);
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
        assert!(error.is_redirect(), "{cause}: {error}");
        assert!(error.to_string().contains(cause), "{cause}: {error}");
        assert_eq!(error.status().map(|s| s.as_u16()), Some(307), "{cause}");
        assert_eq!(seen(&server, "tools/list").len(), 1, "{cause}");
    }
}
