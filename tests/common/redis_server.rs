//! A real `redis-server` child process for replica-sync tests: on a free loopback port (or on
//! every address of a network namespace), no persistence, readiness taken from its own "Ready
//! to accept connections" log line (a barrier, no polling), and kill / restart on the same
//! port / freeze (SIGSTOP) / thaw.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use super::WAIT;
use super::process::free_port;

/// A running redis-server; killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port (on 127.0.0.1, or on every address of its namespace).
    pub port: u16,
    /// The namespace it runs in (`ip netns exec`), if not this one.
    netns: Option<String>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts on a free loopback port.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = Self { child: None, port: free_port(), netns: None, dir };
        server.restart();
        server
    }

    /// Starts inside network namespace `netns`, listening on all of its addresses.
    pub fn start_in(netns: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = Self { child: None, port: free_port(), netns: Some(netns.to_string()), dir };
        server.restart();
        server
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.url_at(std::net::Ipv4Addr::LOCALHOST)
    }

    /// `redis://<ip>:<port>` (an address of its namespace).
    pub fn url_at(&self, ip: std::net::Ipv4Addr) -> String {
        format!("redis://{ip}:{}", self.port)
    }

    /// (Re)starts the server on its port (empty: no persistence) and waits until it accepts
    /// connections.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "still running");
        let mut command = match &self.netns {
            // `ip netns exec` execs: the child is redis-server itself.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "redis-server", "--bind", "0.0.0.0", "--protected-mode", "no"]);
                c
            }
            None => {
                let mut c = Command::new("redis-server");
                c.args(["--bind", "127.0.0.1"]);
                c
            }
        };
        let mut child = command
            .args(["--port", &self.port.to_string(), "--save", "", "--appendonly", "no"])
            .args(["--dir", &self.dir.path().display().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (apt-get install redis-server)");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("Ready to accept connections") {
                    let _ = tx.send(());
                }
            }
        });
        self.child = Some(child);
        rx.recv_timeout(WAIT).expect("redis-server ready in time");
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = self.child.as_ref().expect("running").id() as libc::pid_t;
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill");
    }

    /// Stops the process (SIGSTOP): connections stay open, nothing is answered.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Resumes a frozen process.
    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.thaw();
        }
        self.kill();
    }
}
