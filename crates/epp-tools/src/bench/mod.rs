//! `epp-tools bench ...`: measurements runnable from the binary (numbers go to
//! `docs/benchmarks.md` with the command that produced them), plus synthetic inputs shared
//! with the criterion benches.

pub mod decision;
pub mod extproc;
pub mod index;
pub mod synthetic;

use crate::cli::BenchCommand;

/// Runs a bench subcommand, printing its report.
pub fn run(what: BenchCommand) -> anyhow::Result<()> {
    match what {
        BenchCommand::Decision { body_bytes, endpoints, iterations } => {
            let report = decision::run(body_bytes, endpoints, iterations)?;
            println!("{}", serde_json::to_string(&report)?);
        }
        BenchCommand::Extproc(args) => extproc::run(&args)?,
        BenchCommand::FloorServer { listen, threads } => extproc::floor::serve_until_ctrl_c(listen, threads)?,
        BenchCommand::Index { workload, key_mode, key_algo } => {
            let report = index::run_index_bench(&workload, key_mode, key_algo)?;
            println!("{}", serde_json::to_string(&report)?);
            anyhow::ensure!(report.mismatches == 0, "{} answers differed from the expected files", report.mismatches);
        }
    }
    Ok(())
}

/// Percentile (0..=100) of sorted microsecond samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
