//! Network namespaces for the tests that need real netdevs: a veth pair
//! across two namespaces made by the test, commands and threads run inside
//! one. The namespaces are deleted by a guard, also while a failed
//! assertion unwinds. Needs root and `ip` (iproute2); [`skip_unless_ci`]
//! says so where they are missing.

use std::process::{Command, Output};

/// Runs `args` (program first) and returns its output; panics, with its
/// stderr, when it cannot start or exits non-zero.
pub fn run(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A test whose tool, privilege or kernel feature is missing here is
/// skipped, with the reason; under CI (`CI` set), which provides all of
/// them, that is a failure instead, so that nothing passes untested.
pub fn skip_unless_ci(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: CI must provide it, not skip the test"
    );
    eprintln!("skipped: {why}");
}

/// Whether the test runs as root (network namespaces need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A network namespace, deleted on drop.
pub struct Netns(pub String);

/// Two network namespaces, `<a><pid>` and `<b><pid>`, for a test that needs
/// root: `None`, the test skipped (a failure under CI), without it.
pub fn pair(a: &str, b: &str) -> Option<(Netns, Netns)> {
    if !is_root() {
        skip_unless_ci("needs root for network namespaces");
        return None;
    }
    let pid = std::process::id();
    Some((
        Netns::new(format!("{a}{pid}")),
        Netns::new(format!("{b}{pid}")),
    ))
}

impl Netns {
    /// Creates namespace `name`, deleting a stale one of that name first.
    pub fn new(name: String) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run(&["ip", "netns", "add", &name]);
        Netns(name)
    }

    /// Brings `netdev` in this namespace up.
    pub fn up(&self, netdev: &str) {
        run(&["ip", "-n", &self.0, "link", "set", netdev, "up"]);
    }

    /// Gives `netdev` in this namespace the address `cidr`.
    pub fn addr(&self, netdev: &str, cidr: &str) {
        run(&["ip", "-n", &self.0, "addr", "add", cidr, "dev", netdev]);
    }

    /// A veth pair, `name` here and `peer` in `other`, both up.
    pub fn veth(&self, name: &str, other: &Netns, peer: &str) {
        run(&[
            "ip", "-n", &self.0, "link", "add", name, "type", "veth", "peer", "name", peer,
            "netns", &other.0,
        ]);
        self.up(name);
        other.up(peer);
    }

    /// Runs `f` on a thread that joined this namespace (sockets belong to
    /// the namespace they are opened in) and returns what it returns.
    pub fn run_in<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        in_netns(&self.0, f)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Runs `f` on a thread that joined namespace `ns` and returns what it
/// returns.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        join(&path);
        f()
    })
    .join()
    .expect("netns thread")
}

/// Moves the calling thread into the network namespace at `path`
/// (`/run/netns/<name>`).
pub fn join(path: &str) {
    let file = std::fs::File::open(path).expect("netns file");
    // SAFETY: setns on a valid namespace descriptor moves only this
    // thread.
    let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
}
