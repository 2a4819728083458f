//! Replays a workload directory:
//! `cargo run --release --example index_bench -- /tmp/wl [request|engine]` (default `request`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: index_bench DIR [request|engine]")?;
    let mode = match std::env::args().nth(2).as_deref() {
        None | Some("request") => epp::kvcache::ReplayKeys::Request,
        Some("engine") => epp::kvcache::ReplayKeys::Engine,
        Some(other) => return Err(format!("unknown key mode {other:?}").into()),
    };
    let report = epp::kvcache::run_index_bench(std::path::Path::new(&dir), mode)?;
    println!("{}", serde_json::to_string(&report)?);
    if report.mismatches > 0 {
        std::process::exit(1);
    }
    Ok(())
}
