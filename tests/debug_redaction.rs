//! `Debug` never shows more of an endpoint than its origin (rule 12): a
//! path or query can carry secrets (`?token=...`), and session ids and
//! header values never show at all.

use mcp_scoped_http::Connector;

const ENDPOINT: &str = "http://127.0.0.1:1/mcp/PATH-SECRET?token=QUERY-SECRET";

fn assert_origin_only(shown: &str) {
    for secret in [
        "PATH-SECRET",
        "QUERY-SECRET",
        "token=",
        "/mcp",
        "BEARER-SECRET",
    ] {
        assert!(!shown.contains(secret), "{secret:?} shown: {shown}");
    }
    assert!(
        shown.contains("127.0.0.1:1"),
        "the origin is shown: {shown}"
    );
}

#[test]
fn a_connectors_debug_shows_the_endpoints_origin_only() {
    let connector = Connector::new(ENDPOINT).bearer("BEARER-SECRET");
    assert_origin_only(&format!("{connector:?}"));
    assert_origin_only(&format!("{connector:#?}"));
}

#[test]
fn a_connector_for_an_invalid_endpoint_shows_none_of_it() {
    let shown = format!(
        "{:?}",
        Connector::new("not a url/PATH-SECRET?token=QUERY-SECRET")
    );
    for secret in ["PATH-SECRET", "QUERY-SECRET"] {
        assert!(!shown.contains(secret), "{secret:?} shown: {shown}");
    }
}

#[cfg(feature = "rmcp")]
#[test]
fn an_rmcp_transport_builders_debug_shows_the_endpoints_origin_only() {
    use mcp_scoped_http::adapters::rmcp::ScopedTransport;
    let builder = ScopedTransport::builder(ENDPOINT).bearer("BEARER-SECRET");
    assert_origin_only(&format!("{builder:?}"));
    assert_origin_only(&format!("{builder:#?}"));
}
