//! The real `SIOCETHTOOL` path: a veth pair across two network namespaces
//! made by the test, some traffic, then the exporter's ioctl reader
//! compared name by name and value by value with `ethtool -S` of the same
//! interface. Needs root, `ip` (iproute2) and `ethtool`; the namespaces are
//! deleted by a guard even when an assertion fails.

use roce_netdev::ethtool::{
    decode_gstrings, parse_ethtool_s, read_listing, set_u32, Ioctl, ReplyBuf, StatsCache,
    ETHTOOL_GSTRINGS, ETH_SS_STATS,
};
use roce_netdev::{EthtoolError, EthtoolIo, EthtoolStep};
use roce_testkit::netns::{in_netns, join, pair, run};

/// Reads `netdev` through the ioctl from inside `ns` (a thread that joins
/// the namespace: the socket belongs to the namespace it is opened in).
fn read_in_netns(ns: &str, netdev: &str) -> (Vec<String>, Vec<u64>) {
    let netdev = netdev.to_string();
    in_netns(ns, move || {
        let mut io = Ioctl::open().expect("socket");
        read_listing(&mut io, &netdev).expect("names and values")
    })
}

/// Sends `n` UDP datagrams from inside `ns` (ARP, the datagrams and the
/// ICMP port-unreachable replies move the counters; no `ping` needed).
fn send_udp_in_netns(ns: &str, to: &str, n: usize) {
    let to = to.to_string();
    in_netns(ns, move || {
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
        for _ in 0..n {
            let _ = sock.send_to(b"roce_exporter veth test", &to);
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    // Let the last replies land before the counters are compared.
    std::thread::sleep(std::time::Duration::from_millis(200));
}

#[test]
fn ioctl_matches_ethtool_s_on_a_veth_pair() {
    let Some((a, b)) = pair("roce-nd-a-", "roce-nd-b-") else {
        return;
    };
    // No IPv6: router solicitations would change the counters between reads.
    for ns in [&a.0, &b.0] {
        for conf in ["all", "default"] {
            let key = format!("net.ipv6.conf.{conf}.disable_ipv6=1");
            run(&["ip", "netns", "exec", ns, "sysctl", "-qw", &key]);
        }
    }
    a.veth("vethA", &b, "vethB");
    a.addr("vethA", "10.231.0.1/30");
    b.addr("vethB", "10.231.0.2/30");
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
    let err = read_listing(&mut io, "nosuchif0").unwrap_err();
    assert!(
        matches!(err, roce_netdev::EthtoolError::NoDevice { .. }),
        "{err}"
    );
    let err = read_listing(&mut io, "name-longer-than-ifnamsiz").unwrap_err();
    assert!(
        matches!(err, roce_netdev::EthtoolError::BadName { .. }),
        "{err}"
    );
}

/// `ethtool -L` on a real driver: veth has per-queue statistics
/// (drivers/net/veth.c: "rx_queue_%u_%.18s" and "tx_queue_%u_%.18s" for
/// every real queue), so going from 1 to 32 channels grows the set from 10
/// to 289 while the exporter runs. The sample after the change has the
/// grown set's names and values. Then the guard page against the real
/// kernel: a request with count 0 (which every kernel answers with the
/// whole set, as kernels before 7b07be1ff1cb answer any count) in a
/// one-page buffer too small for 289 names: the kernel's copy stops at the
/// guard page with EFAULT.
#[test]
fn a_set_grown_by_ethtool_l_is_read_whole_and_the_kernel_stops_at_the_guard_page() {
    let Some((a, b)) = pair("roce-ndg-a-", "roce-ndg-b-") else {
        return;
    };
    run(&[
        "ip",
        "-n",
        &a.0,
        "link",
        "add",
        "vethG",
        "numrxqueues",
        "32",
        "numtxqueues",
        "32",
        "type",
        "veth",
        "peer",
        "name",
        "vethH",
        "numrxqueues",
        "32",
        "numtxqueues",
        "32",
        "netns",
        &b.0,
    ]);
    a.up("vethG");
    b.up("vethH");
    let channels = |n: &str| {
        run(&[
            "ip", "netns", "exec", &a.0, "ethtool", "-L", "vethG", "rx", n, "tx", n,
        ]);
    };
    let ethtool_s = || {
        let out = run(&["ip", "netns", "exec", &a.0, "ethtool", "-S", "vethG"]);
        parse_ethtool_s(&String::from_utf8_lossy(&out.stdout))
    };
    channels("1");
    let small = ethtool_s();
    assert_eq!(small.len(), 10, "{small:?}");

    let path = format!("/run/netns/{}", a.0);
    let (cache_tx, cache_rx) = std::sync::mpsc::channel::<()>();
    let (grown_tx, grown_rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        join(&path);
        let mut io = Ioctl::open().expect("socket");
        let wanted = ["peer_ifindex", "tx_queue_0_xdp_xmit", "rx_queue_31_drops"];
        let mut cache = StatsCache::new(wanted.iter().map(|s| s.to_string()).collect());
        let (_, raw) = cache.sample(&mut io, "vethG").expect("first sample");
        let first: Vec<String> = raw.into_iter().map(|r| r.name).collect();
        cache_tx.send(()).unwrap();
        grown_rx.recv().unwrap();
        let (_, raw) = cache
            .sample(&mut io, "vethG")
            .expect("sample after ethtool -L");
        let second: Vec<String> = raw.into_iter().map(|r| r.name).collect();
        let listing = read_listing(&mut io, "vethG").expect("listing");

        // One page for 289 names of 32 bytes, and a count of 0: the kernel
        // copies all 289, 9,248 bytes.
        let mut buf = ReplyBuf::new(1).expect("buffer");
        let words = buf.words_mut();
        set_u32(words, 0, ETHTOOL_GSTRINGS);
        set_u32(words, 4, ETH_SS_STATS);
        set_u32(words, 8, 0);
        let overrun = io.ethtool("vethG", &mut buf);
        let header_len = roce_netdev::ethtool::u32_at(buf.words(), 8);
        let decoded = decode_gstrings(buf.words());
        (first, second, listing, overrun, header_len, decoded)
    });
    cache_rx.recv().unwrap();
    channels("32");
    grown_tx.send(()).unwrap();
    let (first, second, (names, values), overrun, header_len, decoded) =
        reader.join().expect("reader thread");
    let grown = ethtool_s();
    assert_eq!(grown.len(), 289);

    assert_eq!(first, ["peer_ifindex", "tx_queue_0_xdp_xmit"]);
    assert_eq!(
        second,
        ["peer_ifindex", "rx_queue_31_drops", "tx_queue_0_xdp_xmit"]
    );
    let ours: Vec<(String, u64)> = names.into_iter().zip(values).collect();
    assert_eq!(ours, grown);

    assert_eq!(
        overrun,
        Err(EthtoolError::Ioctl {
            netdev: "vethG".into(),
            step: EthtoolStep::Strings,
            errno: libc::EFAULT
        })
    );
    assert_eq!(header_len, 289, "the header was copied before the names");
    assert_eq!(
        decoded, None,
        "289 names are not taken from a 1-page buffer"
    );
}
