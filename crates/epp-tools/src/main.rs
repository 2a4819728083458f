//! The `epp-tools` binary: `sim`, `demo` and `bench ...` (see `epp_tools::cli`). Logs of the
//! in-process epp go to stderr in the console format at `-v 1`: startup, warnings and errors,
//! without the server's per-request info lines (one stderr write each would weigh on the
//! figures); `RUST_LOG` overrides.

use clap::Parser;
use epp::telemetry::tracing::{LogFormat, LogOptions, TimeEncoding};
use epp_tools::cli::{Cli, Command};

/// mimalloc (see `epp::memory`).
#[global_allocator]
static ALLOCATOR: epp::memory::Allocator = epp::memory::Allocator;

/// logr verbosity just below the server's default `-v 2`.
const DEFAULT_VERBOSITY: u8 = 1;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let level = epp::telemetry::tracing::level_for_flags(None, false, DEFAULT_VERBOSITY).map_err(anyhow::Error::msg)?;
    epp::telemetry::tracing::init_with(&LogOptions {
        format: LogFormat::Console,
        level,
        time_encoding: TimeEncoding::default(),
    });
    match cli.command {
        Command::Bench { what } => epp_tools::bench::run(what),
        Command::Sim(args) => epp_tools::sim::command::sim(&args),
        Command::Demo { seed } => epp_tools::sim::command::demo(seed),
    }
}
