//! The Redis the replicas of `sim --replicas` share: a `redis-server` child the tool starts
//! itself (`--replica-sync auto`) on a free loopback port, without persistence, ready when it
//! logs "Ready to accept connections" (a bounded wait), killed on drop; and the `INFO` and
//! `XLEN` reads the report takes from any Redis (CPU seconds, memory, stream length).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Bound on redis-server's start.
const READY_WAIT: Duration = Duration::from_secs(10);

/// Why the Redis could not be started or read.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// `redis-server` could not be run.
    #[error("starting redis-server (is it installed?)")]
    Spawn(#[source] std::io::Error),
    /// It did not report ready in time.
    #[error("redis-server was not ready within {READY_WAIT:?}")]
    NotReady,
    /// A command failed.
    #[error("redis: {0}")]
    Query(#[from] redis::RedisError),
}

/// A redis-server child on 127.0.0.1; killed on drop.
#[derive(Debug)]
pub struct RedisChild {
    child: Child,
    url: String,
}

impl RedisChild {
    /// Starts `redis-server` on a free loopback port and waits until it accepts connections.
    pub fn start() -> Result<Self, RedisError> {
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(RedisError::Spawn)?.port();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(RedisError::Spawn)?;
        let (tx, rx) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.contains("Ready to accept connections") {
                        let _ = tx.send(());
                    }
                }
            });
        }
        let server = Self { child, url: format!("redis://127.0.0.1:{port}") };
        rx.recv_timeout(READY_WAIT).map_err(|_| RedisError::NotReady)?;
        Ok(server)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for RedisChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What Redis reports about itself at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct RedisSample {
    /// `used_cpu_sys + used_cpu_user`, seconds since the server started.
    pub cpu_s: f64,
    /// `used_memory`, bytes.
    pub used_memory: u64,
}

/// Reads `INFO cpu` and `INFO memory` of the Redis at `url`.
pub fn sample(url: &str) -> Result<RedisSample, RedisError> {
    let mut conn = connect(url)?;
    let cpu: String = redis::cmd("INFO").arg("cpu").query(&mut conn)?;
    let memory: String = redis::cmd("INFO").arg("memory").query(&mut conn)?;
    let cpu_s = info_field(&cpu, "used_cpu_sys").unwrap_or(0.0) + info_field(&cpu, "used_cpu_user").unwrap_or(0.0);
    let used_memory = info_field(&memory, "used_memory").unwrap_or(0.0) as u64;
    Ok(RedisSample { cpu_s, used_memory })
}

/// Entries in stream `key`.
pub fn stream_len(url: &str, key: &str) -> Result<u64, RedisError> {
    Ok(redis::cmd("XLEN").arg(key).query(&mut connect(url)?)?)
}

/// Deletes `key` (a finished run's stream, so the next run starts empty).
pub fn delete(url: &str, key: &str) -> Result<(), RedisError> {
    Ok(redis::cmd("DEL").arg(key).query(&mut connect(url)?)?)
}

fn connect(url: &str) -> Result<redis::Connection, RedisError> {
    let client = redis::Client::open(url)?;
    Ok(client.get_connection_with_timeout(Duration::from_secs(2))?)
}

/// The number after `name:` in `INFO` text.
fn info_field(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::info_field;

    #[test]
    fn info_fields_parse() {
        let text = "# CPU\r\nused_cpu_sys:1.50\r\nused_cpu_sys_children:9\r\nused_cpu_user:0.25\r\n";
        assert_eq!(info_field(text, "used_cpu_sys"), Some(1.5));
        assert_eq!(info_field(text, "used_cpu_user"), Some(0.25));
        assert_eq!(info_field(text, "used_memory"), None);
    }
}
