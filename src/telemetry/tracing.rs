//! `tracing` subscriber setup: JSON or human-readable lines on stderr, level from `-v` (logr
//! verbosity, as the Go EPPs) or `--zap-log-level`, unless `RUST_LOG` is set.
//!
//! JSON lines carry zap's field names (`level` lowercase, `ts`, `logger`, `caller`, `msg`,
//! then the event's fields) so log pipelines built for the Go EPPs keep parsing them; `ts`
//! follows `--zap-time-encoding`. The formatter is ours ([`ZapJson`]) because
//! tracing-subscriber's JSON layout has different names (`timestamp`, `fields.message`, upper
//! case levels).

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (`--zap-encoder json` in the Go EPPs).
    Json,
    /// Human-readable.
    Console,
}

/// zap's time encodings (`--zap-time-encoding`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TimeEncoding {
    /// Seconds since the epoch, fractional.
    Epoch,
    /// Milliseconds since the epoch, fractional.
    Millis,
    /// Nanoseconds since the epoch, integer.
    Nano,
    /// `2006-01-02T15:04:05.000Z`.
    Iso8601,
    /// `2006-01-02T15:04:05Z` (controller-runtime's default).
    #[default]
    Rfc3339,
    /// `2006-01-02T15:04:05.999999999Z`.
    Rfc3339nano,
}

impl TimeEncoding {
    /// `ts` for `time`.
    pub fn encode(self, time: SystemTime) -> Value {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        match self {
            TimeEncoding::Epoch => Value::from(since.as_secs_f64()),
            TimeEncoding::Millis => Value::from(since.as_secs_f64() * 1e3),
            TimeEncoding::Nano => Value::from(since.as_nanos() as u64),
            TimeEncoding::Iso8601 => Value::from(humantime::format_rfc3339_millis(time).to_string()),
            TimeEncoding::Rfc3339 => Value::from(humantime::format_rfc3339_seconds(time).to_string()),
            TimeEncoding::Rfc3339nano => Value::from(humantime::format_rfc3339_nanos(time).to_string()),
        }
    }
}

/// Logging settings from the flags.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// Line format.
    pub format: LogFormat,
    /// The `epp` directive: a level (`info`, `debug`, ...) or [`BELOW_DEFAULT`].
    pub level: &'static str,
    /// `ts` encoding of JSON lines.
    pub time_encoding: TimeEncoding,
}

/// The `epp` directive below `-v 2`: info, except the modules whose info lines the Go EPPs
/// log at `V(DEFAULT)` (per-request lines in `extproc::stream`, `Pod added` in
/// `endpoints::store`), which logr hides below verbosity 2. Startup and error lines stay.
pub const BELOW_DEFAULT: &str = "info,epp::extproc::stream=warn,epp::endpoints::store=warn";

/// Maps logr verbosity to the `epp` directive, as GIE's levels (`pkg/common/observability/
/// logging`: DEFAULT=2, VERBOSE=3, DEBUG=4, TRACE=5) enable lines: below 2 the per-request
/// lines are off ([`BELOW_DEFAULT`]); 2 info; 3 and 4 debug (epp has one level for VERBOSE
/// and DEBUG lines); 5 and above trace.
pub fn level_for_verbosity(v: u8) -> &'static str {
    match v {
        0 | 1 => BELOW_DEFAULT,
        2 => "info",
        3 | 4 => "debug",
        _ => "trace",
    }
}

/// The level from `--zap-log-level` (`debug`, `info`, `warn`, `error`, `panic`, `fatal`, or an
/// integer logr verbosity), else `--zap-devel` (debug), else `-v`. zap's `info` is logr
/// verbosity 0, so it hides the `V(DEFAULT)` lines as `-v 0` does.
pub fn level_for_flags(zap_log_level: Option<&str>, zap_devel: bool, verbosity: u8) -> Result<&'static str, String> {
    match zap_log_level.map(str::trim) {
        Some("debug") => Ok("debug"),
        Some("info") => Ok(BELOW_DEFAULT),
        Some("warn") => Ok("warn"),
        Some("error" | "dpanic" | "panic" | "fatal") => Ok("error"),
        Some(n) => match n.parse::<u8>() {
            Ok(v) if v > 0 => Ok(level_for_verbosity(v)),
            _ => Err(format!("invalid --zap-log-level {n:?} (debug, info, error, or an integer > 0)")),
        },
        None if zap_devel => Ok("debug"),
        None => Ok(level_for_verbosity(verbosity)),
    }
}

/// Installs the global subscriber. Safe to call once; later calls are ignored.
pub fn init(format: LogFormat, verbosity: u8) {
    init_with(&LogOptions { format, level: level_for_verbosity(verbosity), time_encoding: TimeEncoding::default() });
}

/// Installs the global subscriber from full options. Later calls are ignored.
pub fn init_with(options: &LogOptions) {
    init_with_spans(options, None);
}

/// Installs the global subscriber: log lines on stderr and, with `spans`, the OpenTelemetry
/// layer that exports `crate::telemetry::otel` spans through that provider. Later calls are
/// ignored.
pub fn init_with_spans(options: &LogOptions, spans: Option<&opentelemetry_sdk::trace::SdkTracerProvider>) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let others = if matches!(options.level, "error") { "error" } else { "warn" };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("epp={},{others}", options.level)));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match options.format {
        LogFormat::Json => lines.event_format(ZapJson { time: options.time_encoding }).boxed(),
        LogFormat::Console => lines.boxed(),
    };
    let otel = spans.map(super::otel::layer);
    let _ = tracing_subscriber::registry().with(lines.with_filter(filter)).with(otel).try_init();
}

/// zap-style JSON lines (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct ZapJson {
    /// `ts` encoding.
    pub time: TimeEncoding,
}

impl<S, N> FormatEvent<S, N> for ZapJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _cx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let line = zap_line(event, self.time, SystemTime::now());
        writeln!(writer, "{line}")
    }
}

/// One event as a zap JSON object (`level`, `ts`, `logger`, `caller`, `msg`, then the
/// event's fields, in that order).
pub fn zap_line(event: &Event<'_>, time: TimeEncoding, now: SystemTime) -> String {
    let meta = event.metadata();
    let mut fields = Map::new();
    event.record(&mut FieldCollector(&mut fields));
    let mut entries: Vec<(String, Value)> = vec![
        ("level".into(), Value::from(zap_level(*meta.level()))),
        ("ts".into(), time.encode(now)),
        ("logger".into(), Value::from(meta.target())),
    ];
    if let (Some(file), Some(line)) = (meta.file(), meta.line()) {
        entries.push(("caller".into(), Value::from(format!("{file}:{line}"))));
    }
    entries.push(("msg".into(), fields.remove("msg").unwrap_or_else(|| Value::from(""))));
    entries.extend(fields);
    let body: Vec<String> = entries.iter().map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), v)).collect();
    format!("{{{}}}", body.join(","))
}

fn zap_level(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

struct FieldCollector<'a>(&'a mut Map<String, Value>);

impl FieldCollector<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        let name = match field.name() {
            "message" => "msg",
            other => other,
        };
        self.0.insert(name.to_string(), value);
    }
}

impl Visit for FieldCollector<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::from(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_lines_use_zap_field_names() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .event_format(ZapJson { time: TimeEncoding::Rfc3339 })
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(pool = "p", count = 3, ok = true, "Pool endpoints changed");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        let order: Vec<usize> = ["\"level\"", "\"ts\"", "\"logger\"", "\"caller\"", "\"msg\""]
            .iter()
            .map(|k| text.find(k).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "zap's key order: {text}");
        assert_eq!(line["level"], "warn");
        assert_eq!(line["msg"], "Pool endpoints changed");
        assert_eq!(line["logger"], "epp::telemetry::tracing::tests");
        assert!(line["caller"].as_str().unwrap().starts_with("src/telemetry/tracing.rs:"), "{line}");
        assert!(line["ts"].as_str().unwrap().ends_with('Z'), "{line}");
        assert_eq!(
            (line["pool"].clone(), line["count"].clone(), line["ok"].clone()),
            ("p".into(), 3.into(), true.into())
        );
    }

    #[test]
    fn time_encodings_and_levels() {
        let t = UNIX_EPOCH + std::time::Duration::from_millis(1_500);
        assert_eq!(TimeEncoding::Epoch.encode(t), Value::from(1.5));
        assert_eq!(TimeEncoding::Millis.encode(t), Value::from(1500.0));
        assert_eq!(TimeEncoding::Nano.encode(t), Value::from(1_500_000_000u64));
        assert_eq!(TimeEncoding::Iso8601.encode(t), Value::from("1970-01-01T00:00:01.500Z"));
        assert_eq!(TimeEncoding::Rfc3339.encode(t), Value::from("1970-01-01T00:00:01Z"));
        assert_eq!(level_for_flags(Some("error"), false, 2), Ok("error"));
        assert_eq!(level_for_flags(Some("4"), false, 2), Ok("debug"));
        assert_eq!(level_for_flags(None, true, 2), Ok("debug"));
        assert_eq!(level_for_flags(None, false, 5), Ok("trace"));
        assert_eq!(level_for_flags(None, false, 1), Ok(BELOW_DEFAULT));
        assert_eq!(level_for_flags(Some("info"), false, 2), Ok(BELOW_DEFAULT));
        assert_eq!(level_for_flags(None, false, 2), Ok("info"));
        assert_eq!(level_for_flags(None, false, 3), Ok("debug"));
        assert!(level_for_flags(Some("loud"), false, 2).is_err());
    }
}
