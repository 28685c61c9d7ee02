//! Telemetry per OpenTelemetry's semantic conventions for MCP: each
//! request's client span as a `tracing-opentelemetry` layer reads it
//! (`otel.name`, `otel.kind`, the `mcp.*`, `jsonrpc.*`, `gen_ai.*`,
//! `server.*` and `error.type` fields), captured by a layer of our own; and
//! with the `otel` feature, the trace context in `params._meta` and the two
//! duration histograms, read back from the SDK's in-memory exporters.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::support::*;
use bytes::Bytes;
use mcp_scoped_http::{Connector, ProtocolVersion, Session};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A closed span: its fields, each as text (its name is `otel.name`).
#[derive(Clone, Debug)]
struct Captured {
    fields: HashMap<&'static str, String>,
}

impl Captured {
    fn get(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str)
    }
}

impl Visit for Captured {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.fields.insert(field.name(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields.insert(field.name(), value.to_owned());
    }
}

/// Records every span, with its fields as they were when it closed.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut captured = Captured {
            fields: HashMap::new(),
        };
        attrs.record(&mut captured);
        ctx.span(id).unwrap().extensions_mut().insert(captured);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        if let Some(captured) = span.extensions_mut().get_mut::<Captured>() {
            values.record(captured);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).unwrap();
        if let Some(captured) = span.extensions_mut().remove::<Captured>() {
            self.0.lock().unwrap().push(captured);
        }
    }
}

impl Capture {
    /// The closed spans whose `otel.name` is `name`.
    fn named(&self, name: &str) -> Vec<Captured> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.get("otel.name") == Some(name))
            .cloned()
            .collect()
    }

    fn one(&self, name: &str) -> Captured {
        let found = self.named(name);
        assert_eq!(
            found.len(),
            1,
            "one span {name:?} in {:#?}",
            self.0.lock().unwrap()
        );
        found.into_iter().next().unwrap()
    }
}

/// Runs `test` with `capture` as the thread's subscriber (the scenario's
/// runtime is on this thread; the test server's is not), under the
/// [`serial`] lock the test holds since before it started its server.
fn captured(test: impl AsyncFnOnce(Capture)) -> Capture {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    run_serial(test(capture.clone()));
    capture
}

/// The JSON-RPC id the server got for the `method` request, as text.
fn request_id(server: &TestServer, method: &str) -> String {
    let request = server
        .requests()
        .into_iter()
        .find(|r| r.rpc_method.as_deref() == Some(method))
        .unwrap_or_else(|| panic!("a {method} request"));
    request.body.unwrap()["id"].to_string()
}

async fn connect(server: &TestServer) -> Session {
    Connector::new(server.url())
        .connect()
        .await
        .expect("connects")
}

#[test]
fn a_tool_call_is_a_client_span_named_per_the_conventions() {
    let _serial = serial();
    let server = TestServer::start(ServerConfig::default());
    let capture = captured(async |_| {
        let session = connect(&server).await;
        let result = session
            .call_tool("tool-000", json!({"text": "hi"}))
            .await
            .unwrap();
        assert_ne!(result["isError"], true, "{result}");
        session.close().await;
    });
    let span = capture.one("tools/call tool-000");
    assert_eq!(span.get("otel.kind"), Some("client"));
    assert_eq!(span.get("mcp.method.name"), Some("tools/call"));
    assert_eq!(span.get("gen_ai.tool.name"), Some("tool-000"));
    assert_eq!(span.get("gen_ai.operation.name"), Some("execute_tool"));
    // A credential: kept out of tracing unless the host opts in.
    assert_eq!(span.get("mcp.session.id"), None);
    assert_eq!(
        span.get("mcp.protocol.version"),
        Some(ProtocolVersion::LATEST.as_str())
    );
    let id = request_id(&server, "tools/call");
    assert_eq!(span.get("jsonrpc.request.id"), Some(id.as_str()));
    assert_eq!(span.get("network.transport"), Some("tcp"));
    assert_eq!(span.get("server.address"), Some("127.0.0.1"));
    assert_eq!(
        span.get("server.port"),
        Some(server.addr().port().to_string().as_str())
    );
    assert_eq!(span.get("error.type"), None);
    assert_eq!(span.get("otel.status_code"), None);
}

#[test]
fn initialize_and_discovery_are_client_spans_too() {
    let _serial = serial();
    let server = TestServer::start(ServerConfig::default());
    let capture = captured(async |_| {
        connect(&server).await.close().await;
    });
    let initialize = capture.one("initialize");
    assert_eq!(initialize.get("otel.kind"), Some("client"));
    let id = request_id(&server, "initialize");
    assert_eq!(initialize.get("jsonrpc.request.id"), Some(id.as_str()));
    assert_eq!(
        initialize.get("mcp.protocol.version"),
        Some(ProtocolVersion::LATEST.as_str())
    );
    let initialized = capture.one("notifications/initialized");
    assert_eq!(initialized.get("otel.kind"), Some("client"));
    assert_eq!(initialized.get("jsonrpc.request.id"), None);
    let list = capture.one("tools/list");
    assert_eq!(list.get("mcp.method.name"), Some("tools/list"));
    assert_eq!(list.get("gen_ai.tool.name"), None);
}

/// The only test that opts in (the setting is the process's, and
/// scenarios run one at a time).
#[test]
fn the_session_id_is_recorded_once_the_host_opts_in() {
    let _serial = serial();
    let server = TestServer::start(ServerConfig::default());
    let mut session_id = None;
    let capture = captured(async |_| {
        // Within the scenario's lock: no other test's session sees it.
        mcp_scoped_http::telemetry::record_session_ids(true);
        let session = connect(&server).await;
        session_id = session.session_id().map(|id| id.expose().to_owned());
        session.call_tool("tool-000", json!({})).await.unwrap();
        session.close().await;
        mcp_scoped_http::telemetry::record_session_ids(false);
    });
    assert!(session_id.is_some());
    let span = capture.one("tools/call tool-000");
    assert_eq!(span.get("mcp.session.id"), session_id.as_deref());
    let initialize = capture.one("initialize");
    assert_eq!(initialize.get("mcp.session.id"), session_id.as_deref());
}

#[test]
fn a_2026_07_28_span_has_a_revision_and_no_session_id() {
    let _serial = serial();
    let server = TestServer::start(ServerConfig::default().with_eras(Eras::Modern));
    let capture = captured(async |_| {
        let session = connect(&server).await;
        assert_eq!(session.protocol_version(), ProtocolVersion::V2026_07_28);
        session
            .call_tool("tool-000", json!({"text": "hi"}))
            .await
            .unwrap();
        session.close().await;
    });
    let span = capture.one("tools/call tool-000");
    assert_eq!(span.get("mcp.session.id"), None);
    assert_eq!(span.get("mcp.protocol.version"), Some("2026-07-28"));
    let id = request_id(&server, "tools/call");
    assert_eq!(span.get("jsonrpc.request.id"), Some(id.as_str()));
}

#[test]
fn failures_carry_error_type_and_the_error_status() {
    let _serial = serial();
    let server = TestServer::start(ServerConfig::default());
    let capture = captured(async |_| {
        let session = connect(&server).await;
        server.push_fault(Fault::on_rpc(
            "prompts/get",
            FaultAction::Raw {
                status: 200,
                content_type: "application/json".into(),
                body: Bytes::from_static(
                    br#"{"jsonrpc":"2.0","id":{id},"error":{"code":-32602,"message":"no such prompt"}}"#,
                ),
            },
        ));
        let error = session.get_prompt("nope", json!({})).await.unwrap_err();
        assert_eq!(error.rpc_code(), Some(-32602));
        server.push_fault(Fault::on_rpc(
            "resources/read",
            FaultAction::Status {
                status: 500,
                content_type: None,
                body: None,
                headers: Vec::new(),
            },
        ));
        session.read_resource("test://r").await.unwrap_err();
        // The test kit answers an unknown tool with `isError: true`.
        let result = session.call_tool("missing", json!({})).await.unwrap();
        assert_eq!(result["isError"], true);
        session.close().await;
    });
    let rpc = capture.one("prompts/get nope");
    assert_eq!(rpc.get("otel.status_code"), Some("ERROR"));
    assert_eq!(rpc.get("error.type"), Some("-32602"));
    assert_eq!(rpc.get("rpc.response.status_code"), Some("-32602"));
    assert_eq!(rpc.get("otel.status_description"), Some("no such prompt"));
    assert_eq!(rpc.get("gen_ai.prompt.name"), Some("nope"));
    // A URI is an attribute, never part of the name.
    let status = capture.one("resources/read");
    assert_eq!(status.get("mcp.resource.uri"), Some("test://r"));
    assert_eq!(status.get("error.type"), Some("500"));
    assert_eq!(status.get("otel.status_code"), Some("ERROR"));
    let tool = capture.one("tools/call missing");
    assert_eq!(tool.get("error.type"), Some("tool_error"));
    assert_eq!(tool.get("otel.status_code"), Some("ERROR"));
}

#[cfg(feature = "otel")]
mod otel {
    use opentelemetry::trace::{SpanKind, TracerProvider as _};
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing::Instrument;

    use super::*;

    #[test]
    fn requests_carry_the_trace_context_and_durations_are_recorded() {
        let _serial = serial();
        let spans = InMemorySpanExporter::default();
        let tracer_provider = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let metrics = InMemoryMetricExporter::default();
        let meter_provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(metrics.clone()).build())
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        opentelemetry::global::set_meter_provider(meter_provider.clone());
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(tracer_provider.tracer("test")));
        let _default = tracing::subscriber::set_default(subscriber);

        let server = TestServer::start(ServerConfig::default());
        run_serial(
            async {
                let session = connect(&server).await;
                session
                    .call_tool("tool-000", json!({"text": "hi"}))
                    .await
                    .unwrap();
                session.close().await;
            }
            .instrument(tracing::info_span!("host")),
        );
        tracer_provider.force_flush().unwrap();

        let call = server
            .requests()
            .into_iter()
            .find(|r| r.rpc_method.as_deref() == Some("tools/call"))
            .unwrap();
        let traceparent = call.meta().unwrap()["traceparent"]
            .as_str()
            .expect("a traceparent in _meta")
            .to_owned();
        let finished = spans.get_finished_spans().unwrap();
        let span = finished
            .iter()
            .find(|s| s.name == "tools/call tool-000")
            .unwrap_or_else(|| panic!("the tool call's span in {finished:#?}"));
        assert_eq!(span.span_kind, SpanKind::Client);
        let context = &span.span_context;
        assert_eq!(
            traceparent,
            format!("00-{}-{}-01", context.trace_id(), context.span_id()),
        );
        let host = finished.iter().find(|s| s.name == "host").unwrap();
        assert_eq!(host.span_context.trace_id(), context.trace_id());

        meter_provider.force_flush().unwrap();
        let exported = metrics.get_finished_metrics().unwrap();
        let find = |name: &str| {
            exported
                .iter()
                .flat_map(|r| r.scope_metrics())
                .filter(|s| s.scope().name() == "mcp-scoped-http")
                .flat_map(|s| s.metrics())
                .find(|m| m.name() == name)
                .unwrap_or_else(|| panic!("{name} in {exported:#?}"))
        };
        let operation = find("mcp.client.operation.duration");
        assert_eq!(operation.unit(), "s");
        let AggregatedMetrics::F64(MetricData::Histogram(histogram)) = operation.data() else {
            panic!("a histogram: {operation:#?}");
        };
        // Other tests' sessions record too, once the provider is global:
        // this server's points only.
        let port = i64::from(server.addr().port());
        fn on_port<'a>(
            mut attributes: impl Iterator<Item = &'a opentelemetry::KeyValue>,
            port: i64,
        ) -> bool {
            attributes.any(|kv| {
                kv.key.as_str() == "server.port" && kv.value == opentelemetry::Value::I64(port)
            })
        }
        let tool_call = histogram
            .data_points()
            .filter(|p| on_port(p.attributes(), port))
            .find(|p| {
                p.attributes().any(|kv| {
                    kv.key.as_str() == "gen_ai.tool.name" && kv.value.as_str() == "tool-000"
                })
            })
            .expect("the tool call's duration");
        assert_eq!(tool_call.count(), 1);
        let attribute = |name: &str| {
            tool_call
                .attributes()
                .find(|kv| kv.key.as_str() == name)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(attribute("mcp.method.name").as_deref(), Some("tools/call"));
        assert_eq!(
            attribute("mcp.protocol.version").as_deref(),
            Some(ProtocolVersion::LATEST.as_str())
        );
        assert_eq!(attribute("server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(attribute("error.type"), None);
        let session = find("mcp.client.session.duration");
        let AggregatedMetrics::F64(MetricData::Histogram(histogram)) = session.data() else {
            panic!("a histogram: {session:#?}");
        };
        let sessions: u64 = histogram
            .data_points()
            .filter(|p| on_port(p.attributes(), port))
            .map(|p| p.count())
            .sum();
        assert_eq!(sessions, 1);
    }
}
