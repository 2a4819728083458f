//! One real `epp` OS process for `sim --wire --wire-processes`: the binary started with the
//! flags a deployment passes (`--config-file`, `--endpoints-file`, `--refresh-metrics-interval`,
//! `--replica-sync-url` ...) on free loopback ports, its stderr kept (the last 64 KiB) for
//! error messages, its `/metrics` and `/debug/state` read over HTTP, and SIGKILL on drop.
//!
//! Unlike the in-process replicas, each process has its own allocator, runtime and threads,
//! and replicas share nothing but Redis and the network, as in a cluster.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};

use super::temp_file::TempFile;
use crate::sim::replicas::SyncTarget;

/// How much of the child's stderr is kept.
const STDERR_KEPT: usize = 64 << 10;
/// Bound on one HTTP read of the admin port.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// What one epp process is started with.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    /// The `epp` binary.
    pub binary: PathBuf,
    /// EndpointPickerConfig text (written to a file for `--config-file`).
    pub config_text: Option<String>,
    /// `--endpoints-file`.
    pub endpoints_file: PathBuf,
    /// `--refresh-metrics-interval`.
    pub refresh_metrics_interval: Duration,
    /// `--replica-sync-url`, `--replica-sync-key` and `--replica-sync-batch-window`.
    pub sync: Option<SyncTarget>,
}

/// A running epp process; killed on drop.
#[derive(Debug)]
pub struct EppProcess {
    child: Child,
    stderr: Arc<Mutex<String>>,
    _config: Option<TempFile>,
    /// The ext_proc port.
    pub grpc: SocketAddr,
    /// The admin port (`/metrics`, `/debug/state`).
    pub metrics: SocketAddr,
}

impl EppProcess {
    /// Starts the process (it is not ready yet: see [`EppProcess::wait_admin`]).
    pub fn spawn(spec: &ProcessSpec) -> anyhow::Result<Self> {
        let (grpc, health, metrics) = (free_port()?, free_port()?, free_port()?);
        let config = spec.config_text.as_deref().map(|t| TempFile::write("epp-sim-config", "yaml", t)).transpose()?;
        let mut args = vec![
            "--secure-serving=false".to_string(),
            "--bind-address=127.0.0.1".to_string(),
            format!("--grpc-port={grpc}"),
            format!("--grpc-health-port={health}"),
            format!("--metrics-port={metrics}"),
            format!("--endpoints-file={}", spec.endpoints_file.display()),
            format!("--refresh-metrics-interval={}us", spec.refresh_metrics_interval.as_micros().max(1)),
            "--enable-debug-state=true".to_string(),
        ];
        if let Some(file) = &config {
            args.push(format!("--config-file={}", file.path().display()));
        }
        if let Some(sync) = &spec.sync {
            args.push(format!("--replica-sync-url={}", sync.url));
            args.push(format!("--replica-sync-key={}", sync.key));
            args.push(format!("--replica-sync-batch-window={}us", sync.batch_window.as_micros()));
        }
        let mut child = Command::new(&spec.binary)
            .args(&args)
            .env_remove("KUBECONFIG")
            .env_remove("EPP_REPLICA_SYNC_URL")
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} (build it with `cargo build -p epp`)", spec.binary.display()))?;
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(pipe) = child.stderr.take() {
            let sink = stderr.clone();
            std::thread::spawn(move || keep_tail(pipe, &sink));
        }
        let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
        Ok(Self { child, stderr, _config: config, grpc: local(grpc), metrics: local(metrics) })
    }

    /// The end of what the process wrote to stderr.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// An error naming the process' exit status, if it has exited.
    pub fn exited(&mut self) -> Option<anyhow::Error> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(anyhow::anyhow!("epp exited ({status}):\n{}", self.stderr())),
            Ok(None) => None,
            Err(e) => Some(e.into()),
        }
    }

    /// GET `path` on the admin port: the body of a 200 answer.
    pub async fn get(&self, path: &str) -> anyhow::Result<String> {
        get(self.metrics, path).await
    }
}

impl Drop for EppProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `http://{addr}{path}`: the body of a 200 answer, within [`HTTP_TIMEOUT`].
pub async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let client = epp::http_client::pooled_for::<Empty<Bytes>>(HTTP_TIMEOUT, 0);
    let uri: hyper::Uri = format!("http://{addr}{path}").parse()?;
    let read = async {
        let response = client.get(uri).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        anyhow::ensure!(status.is_success(), "GET {path}: HTTP {status}");
        Ok(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(HTTP_TIMEOUT, read).await.with_context(|| format!("GET {path} timed out"))?
}

/// A free loopback port (bound, then released for the child to bind).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Reads `pipe` to its end, keeping the last [`STDERR_KEPT`] bytes in `sink`.
fn keep_tail(mut pipe: impl std::io::Read, sink: &Mutex<String>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = pipe.read(&mut buf) {
        if n == 0 {
            break;
        }
        let Ok(mut kept) = sink.lock() else { break };
        kept.push_str(&String::from_utf8_lossy(&buf[..n]));
        if kept.len() > STDERR_KEPT {
            let mut cut = kept.len() - STDERR_KEPT;
            while !kept.is_char_boundary(cut) {
                cut += 1;
            }
            kept.drain(..cut);
        }
    }
}

/// The `epp` binary to start: `explicit`, else `epp` beside the running executable.
pub fn locate_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    let beside = exe.with_file_name(format!("epp{}", std::env::consts::EXE_SUFFIX));
    anyhow::ensure!(
        beside.is_file(),
        "no epp binary beside {} (build it with `cargo build -p epp`, or pass --epp-bin)",
        exe.display()
    );
    Ok(beside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_keeps_only_its_tail() {
        let sink = Mutex::new(String::new());
        let text = "é".repeat(STDERR_KEPT);
        keep_tail(text.as_bytes(), &sink);
        let kept = sink.into_inner().unwrap();
        assert!(kept.len() <= STDERR_KEPT && kept.len() >= STDERR_KEPT - 8, "{}", kept.len());
        assert!(kept.chars().all(|c| c == 'é' || c == '\u{fffd}'));
    }

    #[test]
    fn a_missing_binary_is_a_clear_error() {
        let spec = ProcessSpec {
            binary: PathBuf::from("/nonexistent/epp"),
            config_text: None,
            endpoints_file: PathBuf::from("/nonexistent/endpoints.yaml"),
            refresh_metrics_interval: Duration::from_millis(50),
            sync: None,
        };
        let error = EppProcess::spawn(&spec).expect_err("no such binary");
        assert!(format!("{error:#}").contains("cargo build -p epp"), "{error:#}");
    }
}
