//! The real `SIOCETHTOOL` path: a veth pair across two network namespaces
//! made by the test, some traffic, then the exporter's ioctl reader
//! compared name by name and value by value with `ethtool -S` of the same
//! interface. Needs root, `ip` (iproute2) and `ethtool`; the namespaces are
//! deleted by a guard even when an assertion fails.

use std::process::Command;

use roce_netdev::ethtool::{parse_ethtool_s, Ioctl};
use roce_netdev::EthtoolIo;

fn run(args: &[&str]) -> std::process::Output {
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

/// Deletes the namespace on drop (also while unwinding from a failed assert).
struct Netns(String);

impl Netns {
    fn new(name: String) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run(&["ip", "netns", "add", &name]);
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Reads `netdev` through the ioctl from inside `ns` (a thread that joins
/// the namespace: the socket belongs to the namespace it is opened in).
fn read_in_netns(ns: &str, netdev: &str) -> (Vec<String>, Vec<u64>) {
    let path = format!("/run/netns/{ns}");
    let netdev = netdev.to_string();
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("netns file");
        // SAFETY: setns on a valid namespace descriptor only moves this
        // thread, which ends right after.
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        let mut io = Ioctl::open().expect("socket");
        let count = io.stat_count(&netdev).expect("count");
        let names = io.stat_names(&netdev, count).expect("names");
        let values = io.stat_values(&netdev, count).expect("values");
        (names, values)
    })
    .join()
    .expect("reader thread")
}

/// Sends `n` UDP datagrams from inside `ns` (ARP, the datagrams and the
/// ICMP port-unreachable replies move the counters; no `ping` needed).
fn send_udp_in_netns(ns: &str, to: &str, n: usize) {
    let path = format!("/run/netns/{ns}");
    let to = to.to_string();
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("netns file");
        // SAFETY: as in read_in_netns.
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
        for _ in 0..n {
            let _ = sock.send_to(b"roce_exporter veth test", &to);
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    })
    .join()
    .expect("sender thread");
    // Let the last replies land before the counters are compared.
    std::thread::sleep(std::time::Duration::from_millis(200));
}

#[test]
fn ioctl_matches_ethtool_s_on_a_veth_pair() {
    if !is_root() {
        eprintln!("skipped: needs root (CI runs tests as root)");
        return;
    }
    let id = std::process::id();
    let a = Netns::new(format!("roce-nd-a-{id}"));
    let b = Netns::new(format!("roce-nd-b-{id}"));
    // No IPv6: router solicitations would change the counters between reads.
    for ns in [&a.0, &b.0] {
        run(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
        ]);
        run(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
    }
    run(&[
        "ip", "-n", &a.0, "link", "add", "vethA", "type", "veth", "peer", "name", "vethB", "netns",
        &b.0,
    ]);
    run(&[
        "ip",
        "-n",
        &a.0,
        "addr",
        "add",
        "10.231.0.1/30",
        "dev",
        "vethA",
    ]);
    run(&[
        "ip",
        "-n",
        &b.0,
        "addr",
        "add",
        "10.231.0.2/30",
        "dev",
        "vethB",
    ]);
    run(&["ip", "-n", &a.0, "link", "set", "vethA", "up"]);
    run(&["ip", "-n", &b.0, "link", "set", "vethB", "up"]);
    send_udp_in_netns(&a.0, "10.231.0.2:9", 5);

    let before = run(&["ip", "netns", "exec", &a.0, "ethtool", "-S", "vethA"]);
    let (names, values) = read_in_netns(&a.0, "vethA");
    let after = run(&["ip", "netns", "exec", &a.0, "ethtool", "-S", "vethA"]);
    let before = parse_ethtool_s(&String::from_utf8_lossy(&before.stdout));
    let after = parse_ethtool_s(&String::from_utf8_lossy(&after.stdout));
    assert_eq!(
        before, after,
        "counters moved while reading (stray traffic?)"
    );

    let ours: Vec<(String, u64)> = names.into_iter().zip(values).collect();
    assert_eq!(ours, before);
    // Not a comparison of two empty lists: veth reports its peer's ifindex
    // (drivers/net/veth.c "peer_ifindex") and per-queue counters.
    assert!(ours.len() > 1, "{ours:?}");
    assert!(
        ours.iter().any(|(n, v)| n == "peer_ifindex" && *v > 0),
        "{ours:?}"
    );
}

#[test]
fn missing_netdev_is_a_clear_error() {
    let mut io = Ioctl::open().expect("socket");
    let err = io.stat_count("nosuchif0").unwrap_err();
    assert!(
        matches!(err, roce_netdev::EthtoolError::NoDevice { .. }),
        "{err}"
    );
    let err = io.stat_count("name-longer-than-ifnamsiz").unwrap_err();
    assert!(
        matches!(err, roce_netdev::EthtoolError::BadName { .. }),
        "{err}"
    );
}
