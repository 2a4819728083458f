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
    /// The thread copying stderr; joined after an exit so the capture is complete.
    reader: Option<std::thread::JoinHandle<()>>,
    pub grpc: SocketAddr,
    pub health: SocketAddr,
    pub metrics: SocketAddr,
    launch: Launch,
    /// Restarts after a port was taken between `free_port` and epp's bind.
    port_retries: u32,
}

/// How the process was started, to start it again on other ports.
struct Launch {
    netns: Option<String>,
    bind: IpAddr,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// Restarts allowed when a free port was taken by someone else before epp bound it.
const PORT_RETRIES: u32 = 3;

impl Launch {
    /// Starts epp on three fresh free ports: the child, its captured stderr, and the gRPC,
    /// health and metrics addresses.
    fn start(&self) -> (Child, Arc<Mutex<String>>, std::thread::JoinHandle<()>, [SocketAddr; 3]) {
        let ports = [free_port(), free_port(), free_port()];
        let mut all = self.args.clone();
        all.extend([
            format!("--grpc-port={}", ports[0]),
            format!("--grpc-health-port={}", ports[1]),
            format!("--metrics-port={}", ports[2]),
            format!("--bind-address={}", self.bind),
        ]);
        // `option_env!`: crates/epp-tools' tests include these helpers too and have no `epp`
        // binary of their own (they never start one this way; `epp` on PATH would be used).
        let binary = option_env!("CARGO_BIN_EXE_epp").unwrap_or("epp");
        let mut command = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, binary]);
                c
            }
            None => Command::new(binary),
        };
        command.args(&all).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        command.env_remove("RUST_LOG").env_remove("KUBECONFIG").env_remove("NAMESPACE");
        for (k, v) in &self.env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn epp");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        (child, stderr, reader, ports.map(|port| SocketAddr::new(self.bind, port)))
    }
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
        let launch = Launch {
            netns: netns.map(str::to_string),
            bind,
            args: args.to_vec(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        let (child, stderr, reader, [grpc, health, metrics]) = launch.start();
        Self { child, stderr, reader: Some(reader), grpc, health, metrics, launch, port_retries: 0 }
    }

    /// After an early exit: true, with the process started again on fresh ports, when epp
    /// could not bind because something else took one of its free ports first (a free port
    /// is only free until another test's listener or an outgoing connection takes it).
    fn restarted_after_port_clash(&mut self) -> bool {
        // The process has exited: its stderr reaches EOF, so the capture completes.
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        if self.port_retries >= PORT_RETRIES || !self.stderr().contains("Address already in use") {
            return false;
        }
        self.port_retries += 1;
        let _ = self.child.wait();
        let (child, stderr, reader, [grpc, health, metrics]) = self.launch.start();
        (self.child, self.stderr, self.grpc, self.health, self.metrics) = (child, stderr, grpc, health, metrics);
        self.reader = Some(reader);
        true
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
        let deadline = Instant::now() + WAIT;
        loop {
            let endpoint = Endpoint::from_shared(format!("http://{}", self.health)).unwrap();
            match endpoint.connect().await {
                Ok(channel) => return HealthClient::new(channel),
                Err(error) => {
                    if let Some(status) = self.child.try_wait().unwrap() {
                        if self.restarted_after_port_clash() {
                            continue;
                        }
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
