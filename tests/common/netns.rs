//! Network namespaces and veth links for partition tests (`ip netns`, `ip link`): a
//! [`Netns`] guard deletes its namespace on drop (which deletes every veth with an end in it),
//! names are unique per test process, and [`Netns::unavailable`] says why the machine cannot run
//! them (not root, no `ip`, no namespace support) so such tests can print a notice and pass.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Runs `ip args...`; `Err` with its stderr when it fails.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())),
    }
}

/// Runs `ip args...`, panicking when it fails.
pub fn ip_ok(args: &[&str]) {
    if let Err(error) = ip(args) {
        panic!("{error}");
    }
}

/// A name unique to this test process and call: `<prefix><pid>n<counter>`, at most 15 bytes
/// for a short prefix (interface names are limited to 15).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!("{prefix}{}n{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    assert!(name.len() <= 15, "name too long for an interface: {name}");
    name
}

/// A network namespace, deleted on drop (with the veth links that have an end in it; the
/// processes still in it lose their network).
pub struct Netns {
    /// Its name (`ip netns exec <name>`, `ip -n <name>`).
    pub name: String,
}

impl Netns {
    /// Why namespaces cannot be used here (not root, or `ip netns add` fails), or `None`.
    pub fn unavailable() -> Option<String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("not root".into());
        }
        Netns::create("eppchk").err()
    }

    /// Creates a namespace named `<prefix><pid>n<counter>` with its loopback up.
    pub fn create(prefix: &str) -> Result<Self, String> {
        let name = unique_name(prefix);
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(error) = ip(&["netns", "del", &self.name]) {
            eprintln!("cleanup: {error}");
        }
    }
}

/// One end of a veth link: its namespace (`None`: the test's own), interface name and
/// address (a /30 shared with the other end).
pub struct End<'a> {
    pub netns: Option<&'a Netns>,
    pub name: String,
    pub addr: Ipv4Addr,
}

impl End<'_> {
    /// `ip [-n ns] args...`, panicking when it fails.
    pub fn ip(&self, args: &[&str]) {
        let mut all: Vec<&str> = Vec::new();
        if let Some(ns) = self.netns {
            all.extend(["-n", &ns.name]);
        }
        all.extend(args);
        ip_ok(&all);
    }

    /// Takes the link down at this end: nothing crosses it (no reset, no ICMP: silence).
    pub fn down(&self) {
        self.ip(&["link", "set", &self.name, "down"]);
    }

    /// Brings this end back up.
    pub fn up(&self) {
        self.ip(&["link", "set", &self.name, "up"]);
    }
}

/// Creates a veth pair between `a` and `b` (one `ip link add`, so a failure leaves nothing
/// behind), addresses both (/30) and brings them up. At least one end must be in a [`Netns`]
/// so that deleting it removes the pair.
pub fn veth(a: &End<'_>, b: &End<'_>) {
    // Created from the test's namespace when one end lives there, the other end placed at once.
    let (home, peer) = if b.netns.is_none() { (b, a) } else { (a, b) };
    let peer_ns = peer.netns.expect("a veth pair needs a namespace to be cleaned up with");
    let mut add: Vec<&str> = Vec::new();
    if let Some(ns) = home.netns {
        add.extend(["-n", &ns.name]);
    }
    add.extend(["link", "add", &home.name, "type", "veth", "peer", "name", &peer.name, "netns", &peer_ns.name]);
    ip_ok(&add);
    for end in [a, b] {
        end.ip(&["addr", "add", &format!("{}/30", end.addr), "dev", &end.name]);
        end.up();
    }
}

/// The two host addresses of /30 block `k` (< 8) of this test process: 32 addresses in
/// 10.128.0.0/9 chosen from the process id, so concurrent test processes do not collide.
pub fn subnet(k: u32) -> (Ipv4Addr, Ipv4Addr) {
    assert!(k < 8, "eight /30 blocks per test process");
    let base = u32::from(Ipv4Addr::new(10, 128, 0, 0)) + ((std::process::id() % (1 << 18)) << 5) + (k << 2);
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}
