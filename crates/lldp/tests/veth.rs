//! The real capture path: a veth pair across two network namespaces made by
//! the test; tests/send_lldp.py plays the switch on one end (raw socket,
//! bytes built from IEEE 802.1AB/802.1Qaz), the exporter's
//! [`PacketCapture`] listens on the other from a thread that joined that
//! namespace. Also sends IPv4 traffic the kernel filter must keep out, and
//! checks that a capture without CAP_NET_RAW says so. Needs root, `ip`
//! (iproute2) and python3; the namespaces are deleted by a guard even when
//! an assertion fails.

use roce_host::Priorities;
use std::process::Command;
use std::time::{Duration, Instant};

use roce_lldp::capture::{CaptureError, FrameSource, PacketCapture};
use roce_lldp::parse_frame;
use roce_testkit::netns::{in_netns, is_root, pair, run, skip_unless_ci, Netns};

/// `ip` and python3 (which plays the switch), or `None`: the test skipped.
fn tools() -> Option<()> {
    if Command::new("ip").arg("-V").output().is_err()
        || Command::new("python3").arg("-V").output().is_err()
    {
        skip_unless_ci("needs ip and python3");
        return None;
    }
    Some(())
}

/// tests/send_lldp.py in `sw` with `args` (its options and the interface),
/// as switch leaf-r3-a port swp17 advertising PFC on priority 4 and DSCP
/// 26 to priority 4.
fn play_switch(sw: &Netns, args: &[&str]) {
    let script = format!("{}/tests/send_lldp.py", env!("CARGO_MANIFEST_DIR"));
    let mut cmd = vec!["ip", "netns", "exec", &sw.0, "python3", &script];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["leaf-r3-a", "swp17", "4", "26", "4"]);
    run(&cmd);
}

#[test]
fn capture_hears_the_switch_over_a_veth_pair() {
    let Some((sw, host)) = tools().and_then(|()| pair("lldpsw", "lldphost")) else {
        return;
    };
    sw.veth("sw0", &host, "rdma0");
    sw.addr("sw0", "192.0.2.1/24");
    host.addr("rdma0", "192.0.2.2/24");

    // Open the capture first (frames sent before it exists are not queued).
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let host_name = host.0.clone();
    let listener = std::thread::spawn(move || {
        in_netns(&host_name, move || {
            let (mut cap, errors) =
                PacketCapture::open(&["rdma0".to_string(), "nosuch0".to_string()]).expect("open");
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(matches!(errors[0], CaptureError::NoSuchNetdev(_)));
            tx.send(()).unwrap();
            let mut frames = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while frames.len() < 3 && Instant::now() < deadline {
                cap.drain(16, &mut |netdev, f| {
                    frames.push((netdev.to_string(), f.to_vec()))
                })
                .unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
            done_tx.send(frames).unwrap();
        })
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("capture opened");
    // Other traffic first: ping makes ARP and ICMP the filter must drop.
    let _ = Command::new("ip")
        .args(["netns", "exec", &sw.0, "python3", "-c"])
        .arg("import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);[s.sendto(b'x'*100,('192.0.2.2',9)) for _ in range(50)]")
        .output();
    play_switch(&sw, &["--count", "3", "--interval", "0.1", "sw0"]);
    let frames = done_rx
        .recv_timeout(Duration::from_secs(15))
        .expect("frames");
    listener.join().unwrap();
    assert_eq!(
        frames.len(),
        3,
        "only the three LLDP frames pass the filter"
    );
    for (netdev, f) in &frames {
        assert_eq!(netdev, "rdma0");
        let pdu = parse_frame(f).expect("decodes");
        assert_eq!(pdu.system_name.as_deref(), Some("leaf-r3-a"));
        assert_eq!(pdu.port_id.value, "swp17");
        assert_eq!(pdu.pfc.unwrap().enable, Priorities::one(4));
    }
}

#[test]
fn a_flooded_port_leaves_the_others_their_share() {
    let Some((sw, host)) = tools().and_then(|()| pair("lldpqsw", "lldpqhost")) else {
        return;
    };
    let names: Vec<String> = (0..3).map(|i| format!("rdma{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        sw.veth(&format!("sw{i}"), &host, name);
    }
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let host_name = host.0.clone();
    let listener = std::thread::spawn(move || {
        in_netns(&host_name, move || {
            let (mut cap, errors) = PacketCapture::open(&names).expect("open");
            assert!(errors.is_empty(), "{errors:?}");
            tx.send(()).unwrap();
            go_rx
                .recv_timeout(Duration::from_secs(20))
                .expect("frames sent");
            // Two drains of 6: the first netdev has 40 frames queued, the
            // others one each; a shared bound reads the quiet ones at once.
            let mut per = std::collections::BTreeMap::<String, usize>::new();
            for _ in 0..2 {
                let stats = cap
                    .drain(6, &mut |netdev, _| {
                        *per.entry(netdev.to_string()).or_default() += 1
                    })
                    .unwrap();
                assert!(stats.frames <= 6, "{stats:?}");
            }
            per
        })
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("capture opened");
    for (iface, count) in [("sw0", "40"), ("sw1", "1"), ("sw2", "1")] {
        play_switch(&sw, &["--count", count, iface]);
    }
    go_tx.send(()).unwrap();
    let per = listener.join().unwrap();
    assert_eq!(per.get("rdma1"), Some(&1), "{per:?}");
    assert_eq!(per.get("rdma2"), Some(&1), "{per:?}");
    // The flooded netdev gets its own share of each drain, not more.
    assert!(
        per.get("rdma0").is_some_and(|n| (2..=6).contains(n)),
        "{per:?}"
    );
}

#[test]
fn without_cap_net_raw_the_open_says_so() {
    if !is_root() {
        // Unprivileged already: the open must fail with the permission error.
        let r = PacketCapture::open(&["lo".to_string()]);
        assert!(
            matches!(r, Err(CaptureError::Permission(_))),
            "{:?}",
            r.err()
        );
        return;
    }
    // Drop CAP_NET_RAW from the effective set of a thread (capset works
    // per thread), then open.
    let r = std::thread::spawn(|| {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut header = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let mut data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        // SAFETY: capget/capset with the v3 header and two data words.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()),
                0
            );
            data[0].effective &= !(1 << 13); // CAP_NET_RAW
            assert_eq!(
                libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()),
                0
            );
        }
        PacketCapture::open(&["lo".to_string()]).map(|_| ())
    })
    .join()
    .unwrap();
    assert!(matches!(r, Err(CaptureError::Permission(_))), "{r:?}");
}

/// The figures of docs/lldp.md: CPU of one drain over 8 ports with nothing
/// queued (the usual sample at one frame per 30 s per port), and of
/// draining and decoding one switch frame. Run by hand:
/// `cargo test -p roce-lldp --release --test veth -- --ignored --nocapture`.
#[test]
#[ignore]
fn capture_cost_figures() {
    let Some((sw, host)) = pair("lldpfsw", "lldpfhost") else {
        return;
    };
    let mut names = Vec::new();
    for i in 0..8 {
        let (a, b) = (format!("sw{i}"), format!("rdma{i}"));
        sw.veth(&a, &host, &b);
        names.push(b);
    }
    let frame = roce_lldp::build::switch_frame("leaf-r3-a", "swp17", 4, 26, 4).frame([2; 6]);
    let host_name = host.0.clone();
    let (empty_us, frames_us) = in_netns(&host_name, move || {
        let (mut cap, errors) = PacketCapture::open(&names).expect("open");
        assert!(errors.is_empty());
        let n = 10_000;
        let t = Instant::now();
        for _ in 0..n {
            cap.drain(256, &mut |_, _| {}).unwrap();
        }
        let empty = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(parse_frame(&frame).unwrap());
        }
        let parse = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        (empty, parse)
    });
    eprintln!("drain of 8 ports, nothing queued: {empty_us:.1} us; decoding one switch frame: {frames_us:.2} us");
}
