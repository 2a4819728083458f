//! `tracing` subscriber setup: JSON or human-readable lines on stderr, level from `-v`
//! (logr verbosity, as the Go EPPs) unless `RUST_LOG` is set.

use tracing_subscriber::EnvFilter;

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (`--zap-encoder json` in the Go EPPs).
    Json,
    /// Human-readable.
    Console,
}

/// Maps logr verbosity (GIE: DEFAULT=2, VERBOSE=3, DEBUG=4, TRACE=5) to a level.
pub fn level_for_verbosity(v: u8) -> &'static str {
    match v {
        0..=2 => "info",
        3 | 4 => "debug",
        _ => "trace",
    }
}

/// Installs the global subscriber. Safe to call once; later calls are ignored.
pub fn init(format: LogFormat, verbosity: u8) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("epp={0},warn", level_for_verbosity(verbosity))));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Console => builder.try_init(),
    };
}
