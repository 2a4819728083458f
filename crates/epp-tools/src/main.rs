//! The `epp-tools` binary: `sim`, `demo` and `bench ...` (see `epp_tools::cli`). Logs of the
//! in-process epp go to stderr as the server's default flags would print them (console, info).

use clap::Parser;
use epp::telemetry::tracing::{LogFormat, LogOptions, TimeEncoding};
use epp_tools::cli::{Cli, Command};

/// logr verbosity of the server's default `-v`.
const DEFAULT_VERBOSITY: u8 = 2;

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
