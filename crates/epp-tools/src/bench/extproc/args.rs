//! Flags of `epp bench extproc` and their value parsers (body sizes like `10k`, rate lists
//! like `1000,2000,5000`).

use std::net::SocketAddr;
use std::time::Duration;

/// How the request body crosses the ext_proc stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BodyMode {
    /// `FULL_DUPLEX_STREAMED`: body chunks in, headers reply plus streamed body echo out.
    FullDuplex,
    /// `BUFFERED`: headers reply at once, then one body message and the routing body reply.
    Buffered,
}

impl BodyMode {
    /// Envoy's enum value in `protocol_config`.
    pub fn wire(self) -> i32 {
        match self {
            Self::FullDuplex => 4,
            Self::Buffered => 2,
        }
    }
}

/// What the chat bodies look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BodyShape {
    /// A system prompt and one user turn of plain ASCII words: the body the floor
    /// comparisons have always used; its strings have no escapes.
    Plain,
    /// A system prompt, then many short user and assistant turns (some multi-part, with an
    /// image URL), text with quotes, newlines and non-ASCII letters, and a `tools` array: the
    /// shape of a real multi-turn chat, whose strings a JSON parser must unescape.
    Turns,
}

/// Flags of `epp bench extproc`.
#[derive(Clone, Debug, clap::Args)]
pub struct ExtprocArgs {
    /// Offered rate, requests per second (ignored when --rates is given).
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Sweep: comma-separated rates, each run for --duration.
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Measured time per rate.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Unmeasured warm-up at the first rate before measuring.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Request body mode.
    #[arg(long, value_enum, default_value = "full-duplex")]
    pub body_mode: BodyMode,
    /// Body size: bytes, or with a k / m suffix (10k = 10,000 bytes, 1m = 1,000,000).
    #[arg(long, default_value = "10k", value_parser = parse_size)]
    pub body_size: usize,
    /// Shape of the chat bodies.
    #[arg(long, value_enum, default_value = "plain")]
    pub body_shape: BodyShape,
    /// Largest body chunk sent in one message (full duplex), like Envoy's buffer slices.
    #[arg(long, default_value = "64k", value_parser = parse_size)]
    pub chunk_size: usize,
    /// Cap on streams in flight; a request due while the cap is reached is dropped and counted.
    #[arg(long, default_value_t = 1000)]
    pub concurrency: usize,
    /// HTTP/2 connections the streams are spread over (Envoy opens a few per worker).
    #[arg(long, default_value_t = 2)]
    pub connections: usize,
    /// Per-request timeout (counted as an error).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// p99 objective for the max sustained rate, milliseconds.
    #[arg(long, default_value_t = 5.0)]
    pub slo_ms: f64,
    /// External epp (h2c) instead of one started in process.
    #[arg(long)]
    pub target: Option<SocketAddr>,
    /// Process id of the `--target` epp: its CPU per request is read from `/proc/<pid>`.
    #[arg(long, requires = "target")]
    pub target_pid: Option<u32>,
    /// Also load the no-op floor server (same tonic stack, same message pattern), alternating
    /// with epp at each rate, and report epp's CPU per request and max rate as ratios to it.
    #[arg(long)]
    pub floor: bool,
    /// Simulated endpoints of the in-process epp (each with a tiny `/metrics` server).
    #[arg(long, default_value_t = 8)]
    pub endpoints: usize,
    /// Worker threads of the in-process epp.
    #[arg(long, default_value_t = 2)]
    pub server_threads: usize,
    /// Worker threads of the load generator.
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// KV block events per second published over ZeroMQ to the in-process epp's
    /// precise-prefix producer while serving (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub kv_events: f64,
    /// Print one JSON line per rate instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl ExtprocArgs {
    /// Rates to run, in order.
    pub fn rate_list(&self) -> Vec<f64> {
        if self.rates.is_empty() { vec![self.rate] } else { self.rates.clone() }
    }

    /// Problems with the flags, all at once.
    pub fn check(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.rate_list().iter().any(|r| !r.is_finite() || *r <= 0.0) {
            problems.push("rates must be positive".to_string());
        }
        if self.duration.is_zero() {
            problems.push("--duration must be positive".into());
        }
        for (name, v) in [
            ("--concurrency", self.concurrency),
            ("--connections", self.connections),
            ("--endpoints", self.endpoints),
            ("--server-threads", self.server_threads),
            ("--client-threads", self.client_threads),
            ("--chunk-size", self.chunk_size),
        ] {
            if v == 0 {
                problems.push(format!("{name} must be at least 1"));
            }
        }
        if !self.kv_events.is_finite() || self.kv_events < 0.0 {
            problems.push("--kv-events must be >= 0".into());
        }
        if self.kv_events > 0.0 && self.target.is_some() {
            problems.push("--kv-events needs the in-process epp (no --target)".into());
        }
        if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// `1000`, `10k`, `1m`, `64KiB`-style sizes (k = 1,000, ki = 1,024).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let n: usize = digits.parse().map_err(|_| format!("size {s:?}: expected a number like 10k or 1m"))?;
    let unit = match unit {
        "" => 1,
        "k" => 1_000,
        "ki" => 1 << 10,
        "m" => 1_000_000,
        "mi" => 1 << 20,
        _ => return Err(format!("size {s:?}: unknown unit {unit:?} (use k, ki, m or mi)")),
    };
    n.checked_mul(unit).ok_or_else(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: ExtprocArgs,
    }

    fn parse(flags: &[&str]) -> Result<ExtprocArgs, clap::Error> {
        Cmd::try_parse_from(std::iter::once("bench").chain(flags.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_size("1k"), Ok(1_000));
        assert_eq!(parse_size("10K"), Ok(10_000));
        assert_eq!(parse_size("1m"), Ok(1_000_000));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("ten").is_err());
        assert!(parse_size("5q").is_err());
        assert!(parse_size("99999999999999999999m").is_err());
    }

    #[test]
    fn defaults_are_one_rate_full_duplex_10k() {
        let a = parse(&[]).expect("defaults parse");
        assert_eq!(a.rate_list(), vec![1000.0]);
        assert_eq!((a.body_mode, a.body_size, a.slo_ms), (BodyMode::FullDuplex, 10_000, 5.0));
        assert!(a.target.is_none());
        assert_eq!(a.check(), Ok(()));
    }

    #[test]
    fn sweep_mode_and_target_parse() {
        let a = parse(&[
            "--rates",
            "1000,2000,5000",
            "--body-mode",
            "buffered",
            "--body-size",
            "1m",
            "--target",
            "127.0.0.1:9002",
            "--duration",
            "2s",
            "--json",
        ])
        .expect("parses");
        assert_eq!(a.rate_list(), vec![1000.0, 2000.0, 5000.0]);
        assert_eq!((a.body_mode, a.body_size, a.json), (BodyMode::Buffered, 1_000_000, true));
        assert_eq!(a.target, Some("127.0.0.1:9002".parse().unwrap()));
        assert_eq!(a.duration, Duration::from_secs(2));
    }

    #[test]
    fn bad_values_are_rejected_not_panicked_on() {
        assert!(parse(&["--body-mode", "streamed"]).is_err());
        assert!(parse(&["--rates", "1000,x"]).is_err());
        assert!(parse(&["--target", "nowhere"]).is_err());
        let zero = parse(&["--rates", "0,100", "--concurrency", "0"]).expect("parses");
        let err = zero.check().expect_err("rejected");
        assert!(err.contains("positive") && err.contains("--concurrency"), "{err}");
        let kv = parse(&["--kv-events", "1000", "--target", "127.0.0.1:1"]).expect("parses");
        assert!(kv.check().expect_err("rejected").contains("in-process"));
    }
}
