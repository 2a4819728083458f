//! OpenTelemetry traces (`--tracing`, `OTEL_*`): the span names and attributes, the W3C
//! `traceparent` extraction that continues the gateway's trace, and the exporter setup (OTLP
//! over gRPC through `opentelemetry-otlp`'s tonic exporter, spans bridged from `tracing` by
//! `tracing-opentelemetry`).
//!
//! Spans carry target [`TARGET`]; only the OpenTelemetry layer enables that target, so with
//! tracing off every span macro below is a disabled callsite (no allocation, fields not
//! evaluated). Names follow GIE where it has one (`gateway.request`,
//! `gateway.director.handle_request`, `gateway.scheduler.schedule`) and llm-d otherwise
//! (`run_scheduler_profile`, `llm_d.epp.scorer.<type>`); attributes follow GIE
//! (`gen_ai.request.model`, `gateway.target_model`, `gateway.target_pod.name`, ...).
//!
//! Unsampled requests: the sampler decides once, when [`request_span`] creates the root
//! `gateway.request`; an unsampled root is marked ([`Unsampled`] in its registry
//! extensions), and the layer's filter ([`SampledChildren`]) disables every span opened
//! inside it. `tracing-opentelemetry` would otherwise build each child's data (attributes,
//! ids, timings) only for the sampler to drop it; a disabled child costs one filter call.
//!
//! Exporter choice, where GIE's behaviour is not wanted verbatim: GIE's default
//! `OTEL_TRACES_EXPORTER` is `console` (spans printed on stdout). epp exports over OTLP when
//! `OTEL_TRACES_EXPORTER=otlp` or an `OTEL_EXPORTER_OTLP_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; otherwise (and for `console` or `none`) no
//! spans are exported and one line says why, so stdout/stderr keep carrying only log lines.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::request::headers::RequestHeaders;

/// `tracing` target of every span exported to OpenTelemetry. Not under `epp`: the log filter
/// (`epp=info`) matches targets by prefix and would otherwise record every span for logging.
pub const TARGET: &str = "otel";

/// GIE's default service name (`OTEL_SERVICE_NAME` unset).
pub const DEFAULT_SERVICE_NAME: &str = "gateway-api-inference-extension/epp";

/// GIE's default sampler: parent-based, 10 % of new traces.
const DEFAULT_RATIO: f64 = 0.1;

/// Where spans go, decided from `--tracing` and the environment.
#[derive(Clone, Debug, PartialEq)]
pub enum ExportPlan {
    /// Nothing is exported (the reason is logged once).
    Off(String),
    /// OTLP over gRPC (endpoint and headers from the `OTEL_EXPORTER_OTLP_*` variables,
    /// default `http://localhost:4317`).
    Otlp,
}

/// Decides the exporter; `env` reads one environment variable.
pub fn export_plan(enabled: bool, env: &dyn Fn(&str) -> Option<String>) -> ExportPlan {
    if !enabled {
        return ExportPlan::Off("--tracing=false".into());
    }
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    match env("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
        Some("otlp") => ExportPlan::Otlp,
        Some("none") => ExportPlan::Off("OTEL_TRACES_EXPORTER=none".into()),
        Some(other) if !other.is_empty() && other != "console" => {
            ExportPlan::Off(format!("OTEL_TRACES_EXPORTER={other} is not supported (otlp, none)"))
        }
        _ if set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") => ExportPlan::Otlp,
        _ => ExportPlan::Off(
            "no OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_TRACES_EXPORTER is not otlp (epp has no console exporter)".into(),
        ),
    }
}

/// The sampler of `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` (default
/// `parentbased_traceidratio` with 0.1, as GIE).
pub fn sampler(env: &dyn Fn(&str) -> Option<String>) -> Result<Sampler, String> {
    let ratio = match env("OTEL_TRACES_SAMPLER_ARG") {
        Some(arg) if !arg.trim().is_empty() => match arg.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => r,
            _ => return Err(format!("OTEL_TRACES_SAMPLER_ARG={arg:?} is not a ratio in [0, 1]")),
        },
        _ => DEFAULT_RATIO,
    };
    let name = env("OTEL_TRACES_SAMPLER").unwrap_or_default();
    Ok(match name.trim() {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatioBased(ratio),
        "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "" | "parentbased_traceidratio" => Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))),
        other => return Err(format!("OTEL_TRACES_SAMPLER={other:?} is not supported")),
    })
}

/// A tracer provider exporting over OTLP/gRPC with the environment's sampler and resource
/// (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`; service name defaults to GIE's). Must
/// run inside a Tokio runtime (the gRPC channel's worker is spawned on it).
pub fn otlp_provider(env: &dyn Fn(&str) -> Option<String>) -> Result<SdkTracerProvider, String> {
    use opentelemetry_otlp::WithExportConfig as _;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic();
    // The exporter reads the process environment itself; `env` wins so callers can inject.
    let endpoint = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .find_map(|k| env(k).filter(|v| !v.trim().is_empty()));
    if let Some(endpoint) = endpoint {
        exporter = exporter.with_endpoint(endpoint.trim());
    }
    let exporter = exporter.build().map_err(|e| format!("OTLP exporter: {e}"))?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    let named = env("OTEL_SERVICE_NAME").is_some_and(|v| !v.trim().is_empty())
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|v| v.contains("service.name="));
    if !named {
        resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler(env)?)
        .with_resource(resource.build())
        .build())
}

/// The `tracing` layer that turns [`TARGET`] spans into OpenTelemetry spans of `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("epp"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(SampledChildren)
}

/// Marks a root span the sampler dropped (in the span's registry extensions).
#[derive(Clone, Copy, Debug)]
pub struct Unsampled;

/// Filter of the OpenTelemetry layer: spans of [`TARGET`] only, and none inside a span
/// marked [`Unsampled`].
#[derive(Clone, Copy, Debug)]
pub struct SampledChildren;

impl<S> tracing_subscriber::layer::Filter<S> for SampledChildren
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn enabled(&self, meta: &tracing::Metadata<'_>, cx: &tracing_subscriber::layer::Context<'_, S>) -> bool {
        meta.target() == TARGET
            && cx.lookup_current().is_none_or(|parent| parent.extensions().get::<Unsampled>().is_none())
    }

    fn callsite_enabled(&self, meta: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        if meta.target() == TARGET {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    }
}

/// Asks the sampler about `span` (a root span of [`TARGET`]) now and marks it [`Unsampled`]
/// when it was dropped, so no child spans are built under it. Returns whether it is sampled.
fn decide_sampling(span: &Span) -> bool {
    use opentelemetry::trace::TraceContextExt as _;
    let sampled = span.context().span().span_context().is_sampled();
    if !sampled {
        span.with_subscriber(|(id, dispatch)| {
            if let Some(registry) = dispatch.downcast_ref::<tracing_subscriber::Registry>()
                && let Some(data) = tracing_subscriber::registry::LookupSpan::span(registry, id)
            {
                data.extensions_mut().replace(Unsampled);
            }
        });
    }
    sampled
}

/// Request headers as a propagation carrier.
struct HeaderCarrier<'a>(&'a RequestHeaders);

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.all.iter().map(|(k, _)| k.as_str()).collect()
    }
}

/// The per-request server span `gateway.request`, a child of the W3C `traceparent` (and
/// `tracestate`) of the request headers when present. `Span::none()` when tracing is off.
pub fn request_span(headers: &RequestHeaders) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "gateway.request",
        otel.kind = "server",
        gen_ai.request.model = tracing::field::Empty,
        gateway.target_model = tracing::field::Empty,
        gateway.request.size_bytes = tracing::field::Empty,
        gateway.request.id = tracing::field::Empty,
        gateway.target_pod.name = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if headers.get("traceparent").is_some() {
        let parent = TraceContextPropagator::new().extract(&HeaderCarrier(headers));
        let _ = span.set_parent(parent);
    }
    decide_sampling(&span);
    span
}

/// Records the parsed request on the `gateway.request` span.
pub fn record_request(span: &Span, model: &str, target_model: &str, body_bytes: usize, request_id: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.request.model", model);
    span.record("gateway.target_model", target_model);
    span.record("gateway.request.size_bytes", body_bytes as u64);
    if let Some(id) = request_id {
        span.record("gateway.request.id", id);
    }
}

/// Records the chosen endpoint (or the failure) on a span that declared
/// `gateway.target_pod.name` and `otel.status_code`.
pub fn record_pick(span: &Span, chosen: Result<&str, &str>) {
    if span.is_disabled() {
        return;
    }
    match chosen {
        Ok(endpoint) => span.record("gateway.target_pod.name", endpoint),
        Err(_) => span.record("otel.status_code", "ERROR"),
    };
}

/// Span of parsing the request body.
pub fn parse_span() -> Span {
    tracing::info_span!(target: TARGET, "epp.parse_body")
}

/// Span of tokenising the prompt.
pub fn tokenize_span() -> Span {
    tracing::info_span!(target: TARGET, "epp.tokenize")
}

/// Span of admission and routing (GIE's `gateway.director.handle_request`).
pub fn director_span() -> Span {
    tracing::info_span!(
        target: TARGET,
        "gateway.director.handle_request",
        gateway.admission.result = tracing::field::Empty,
        gateway.target_pod.name = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Span of waiting in the Flow Control queue.
pub fn flow_control_span(priority: i32) -> Span {
    tracing::info_span!(
        target: TARGET,
        "epp.flow_control.wait",
        gateway.admission.priority = priority,
        gateway.admission.result = tracing::field::Empty,
    )
}

/// Span of one scheduling cycle (GIE's `gateway.scheduler.schedule`).
pub fn schedule_span(candidates: usize) -> Span {
    tracing::info_span!(
        target: TARGET,
        "gateway.scheduler.schedule",
        gateway.scheduler.candidate_pods = candidates as u64,
        gateway.scheduler.result = tracing::field::Empty,
        gateway.target_pod.name = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Records a scheduling cycle's outcome on its span.
pub fn record_schedule(span: &Span, chosen: Result<&str, &str>) {
    if span.is_disabled() {
        return;
    }
    span.record("gateway.scheduler.result", if chosen.is_ok() { "scheduled" } else { "failed" });
    record_pick(span, chosen);
}

/// Span of one scheduling profile (llm-d's `run_scheduler_profile`).
pub fn profile_span(profile: &str) -> Span {
    tracing::info_span!(target: TARGET, "run_scheduler_profile", llm_d.epp.profile = profile)
}

/// Span of one plugin call; `extension_point` is `filter`, `scorer` or `picker` (llm-d names
/// scorer spans `llm_d.epp.scorer.<name>`; epp uses that form for every extension point).
pub fn plugin_span(extension_point: &'static str, plugin: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "epp.plugin",
        otel.name = %format_args!("llm_d.epp.{extension_point}.{plugin}"),
        llm_d.epp.plugin.name = plugin,
        llm_d.epp.extension_point = extension_point,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn exporter_follows_the_environment() {
        assert_eq!(export_plan(true, &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")])), ExportPlan::Otlp);
        assert_eq!(export_plan(true, &env(&[("OTEL_TRACES_EXPORTER", "otlp")])), ExportPlan::Otlp);
        assert!(matches!(export_plan(true, &env(&[])), ExportPlan::Off(_)));
        assert!(matches!(export_plan(true, &env(&[("OTEL_TRACES_EXPORTER", "console")])), ExportPlan::Off(_)));
        let none = [("OTEL_TRACES_EXPORTER", "none"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")];
        assert!(matches!(export_plan(true, &env(&none)), ExportPlan::Off(_)));
        assert!(matches!(
            export_plan(false, &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")])),
            ExportPlan::Off(_)
        ));
    }

    /// Child spans are built only under a sampled `gateway.request`: the sampler's "no" (its
    /// own, or the gateway's `traceparent` flags under a parent-based sampler) keeps the
    /// OpenTelemetry layer from building them. The registry still holds such a span (a
    /// per-layer filter does not disable a span for the whole subscriber), so the observable is
    /// its OpenTelemetry context: valid (a trace id) only when the layer built it.
    #[test]
    fn children_of_an_unsampled_request_are_not_built() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let unsampled_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        let sampled_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cases = [
            (Sampler::AlwaysOff, None, false),
            (Sampler::AlwaysOn, None, true),
            (Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), Some(unsampled_parent), false),
            (Sampler::ParentBased(Box::new(Sampler::AlwaysOff)), Some(sampled_parent), true),
        ];
        for (sampler, parent, sampled) in cases {
            let case = format!("{sampler:?} with {parent:?}");
            let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
            let subscriber = tracing_subscriber::registry().with(layer(&provider));
            let mut all = vec![(":path".to_string(), "/v1/chat/completions".to_string())];
            all.extend(parent.map(|p| ("traceparent".to_string(), p.to_string())));
            let headers = RequestHeaders { all };
            tracing::subscriber::with_default(subscriber, || {
                let request = request_span(&headers);
                assert!(!request.is_disabled(), "{case}: the root is always built");
                let built = |span: &Span| {
                    use opentelemetry::trace::TraceContextExt as _;
                    span.context().span().span_context().is_valid()
                };
                let director = request.in_scope(director_span);
                assert_eq!(built(&director), sampled, "{case}: director span");
                let plugin = request.in_scope(|| director.in_scope(|| plugin_span("scorer", "s")));
                assert_eq!(built(&plugin), sampled, "{case}: grandchild span");
                let next = request_span(&RequestHeaders { all: Vec::new() });
                assert!(!next.is_disabled(), "{case}: a later request is judged on its own");
            });
        }
    }

    #[test]
    fn sampler_defaults_to_gie_and_rejects_nonsense() {
        let default = format!("{:?}", sampler(&env(&[])).unwrap());
        assert!(default.contains("ParentBased") && default.contains("0.1"), "{default}");
        let all = [("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "1")];
        assert_eq!(format!("{:?}", sampler(&env(&all)).unwrap()), "TraceIdRatioBased(1.0)");
        assert!(sampler(&env(&[("OTEL_TRACES_SAMPLER_ARG", "2")])).is_err());
        assert!(sampler(&env(&[("OTEL_TRACES_SAMPLER", "sometimes")])).is_err());
    }
}
