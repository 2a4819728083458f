//! The real `epp` binary as a child process: free loopback ports, stderr captured, SIGTERM,
//! bounded waits for exit, and clients for its health and ext_proc ports (TLS accepting the
//! self-signed certificate).

use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use epp::proto::ext_proc::external_processor_client::ExternalProcessorClient;
use epp::proto::grpc::health::v1::health_check_response::ServingStatus;
use epp::proto::grpc::health::v1::health_client::HealthClient;
use epp::proto::grpc::health::v1::{HealthCheckRequest, HealthListRequest};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use super::WAIT;

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A running `epp` process; killed on drop.
pub struct EppProcess {
    child: Child,
    stderr: Arc<Mutex<String>>,
    pub grpc: SocketAddr,
    pub health: SocketAddr,
    pub metrics: SocketAddr,
}

impl EppProcess {
    /// Starts `epp args... --grpc-port=.. --grpc-health-port=.. --metrics-port=..
    /// --bind-address=127.0.0.1` with `env`.
    pub fn spawn(args: &[String], env: &[(&str, &str)]) -> Self {
        Self::spawn_in(None, IpAddr::from([127, 0, 0, 1]), args, env)
    }

    /// [`EppProcess::spawn`] inside network namespace `netns` (`ip netns exec`, which execs:
    /// the child is epp itself) when given, bound to `bind` (an address of that namespace).
    pub fn spawn_in(netns: Option<&str>, bind: IpAddr, args: &[String], env: &[(&str, &str)]) -> Self {
        let (grpc, health, metrics) = (free_port(), free_port(), free_port());
        let mut all = args.to_vec();
        all.extend([
            format!("--grpc-port={grpc}"),
            format!("--grpc-health-port={health}"),
            format!("--metrics-port={metrics}"),
            format!("--bind-address={bind}"),
        ]);
        // `option_env!`: crates/epp-tools' tests include these helpers too and have no `epp`
        // binary of their own (they never start one this way; `epp` on PATH would be used).
        let binary = option_env!("CARGO_BIN_EXE_epp").unwrap_or("epp");
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, binary]);
                c
            }
            None => Command::new(binary),
        };
        command.args(&all).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        command.env_remove("RUST_LOG").env_remove("KUBECONFIG").env_remove("NAMESPACE");
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn epp");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let at = |port| SocketAddr::new(bind, port);
        Self { child, stderr, grpc: at(grpc), health: at(health), metrics: at(metrics) }
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "kill -TERM");
    }

    /// Sends SIGKILL (no shutdown path runs).
    pub fn kill(&mut self) {
        self.child.kill().expect("kill -KILL");
    }

    /// Waits for the exit (polling `try_wait` until `limit`); `None` if still running.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<(ExitStatus, Duration)> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some((status, start.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// A health client (plaintext), connecting within [`WAIT`] (the process may still be
    /// starting).
    pub async fn health_client(&mut self) -> HealthClient<Channel> {
        let endpoint = Endpoint::from_shared(format!("http://{}", self.health)).unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            match endpoint.connect().await {
                Ok(channel) => return HealthClient::new(channel),
                Err(error) => {
                    if let Some(status) = self.child.try_wait().unwrap() {
                        panic!("epp exited ({status}) before serving health:\n{}", self.stderr());
                    }
                    assert!(Instant::now() < deadline, "health port not up: {error}\n{}", self.stderr());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Waits until health `service` reports `want`.
    pub async fn wait_health(&mut self, service: &str, want: ServingStatus) {
        let mut client = self.health_client().await;
        let deadline = Instant::now() + WAIT;
        loop {
            let got = client.check(HealthCheckRequest { service: service.into() }).await.map(|r| r.into_inner().status);
            if got.as_ref().ok() == Some(&(want as i32)) {
                return;
            }
            assert!(Instant::now() < deadline, "health {service:?} is {got:?}, not {want:?}\n{}", self.stderr());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `List` of the health service: name -> status.
    pub async fn health_list(&mut self) -> Vec<(String, i32)> {
        let mut client = self.health_client().await;
        let list = client.list(HealthListRequest {}).await.expect("List").into_inner();
        let mut out: Vec<(String, i32)> = list.statuses.into_iter().map(|(k, v)| (k, v.status)).collect();
        out.sort();
        out
    }

    /// An ext_proc client: h2c, or TLS accepting any certificate (the self-signed one).
    pub async fn ext_proc_client(&self, tls: bool) -> ExternalProcessorClient<Channel> {
        ExternalProcessorClient::new(channel(self.grpc, tls).await)
    }
}

impl Drop for EppProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gRPC channel to `addr`: h2c, or TLS (ALPN h2) that accepts any server certificate.
pub async fn channel(addr: SocketAddr, tls: bool) -> Channel {
    let endpoint = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect_timeout(WAIT);
    if !tls {
        return endpoint.connect().await.expect("connect h2c");
    }
    let mut config = epp::http_client::client_tls(&epp::http_client::ServerCheck::SkipVerify).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    endpoint
        .connect_with_connector(tower::service_fn(move |_: hyper::Uri| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").unwrap();
                let stream = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .expect("connect TLS")
}
