//! Replays a workload directory: `cargo run --release --example index_bench -- /tmp/wl`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: index_bench DIR")?;
    let report = epp::kvcache::bench::run_index_bench(std::path::Path::new(&dir))?;
    println!("{}", serde_json::to_string(&report)?);
    if report.mismatches > 0 {
        std::process::exit(1);
    }
    Ok(())
}
