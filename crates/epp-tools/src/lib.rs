//! epp-tools: the fleet simulator and the benchmarks of epp, outside the server crate.
//!
//! They drive the `epp` library (its real scheduler, ext_proc server, KV-event index) through
//! the API that crate documents as public for tools; the server binary does not link them.
//! They are a second binary (`epp-tools`) rather than subcommands of `epp` because Cargo
//! cannot build the root package's `epp` binary from a crate that itself depends on the
//! root's library (a package cycle).
//!
//! Module map:
//! - `cli`: the command line (`sim`, `demo`, `bench {decision, extproc, index}`).
//! - `sim`: the fleet simulator: simulated vLLM pods driven by the real scheduler in process
//!   (or through a real epp on loopback in wire mode).
//! - `bench`: measurements runnable from the binary, plus synthetic inputs shared with the
//!   criterion benches of this crate.

pub mod bench;
pub mod cli;
pub mod sim;
