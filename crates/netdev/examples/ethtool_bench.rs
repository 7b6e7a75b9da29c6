//! Benchmark (bench/netdev/README.md): CPU per sample of 8 netdevs read the
//! exporter's way against spawning `ethtool -S` for the same netdevs, in
//! the same run.
//!
//! - `mapped-1467`: 8 netdevs each serving the recorded ConnectX-7 listing
//!   (`tests/fixtures/ethtool/mlx5-cx7.txt`, 1,467 counters) through an
//!   in-memory [`EthtoolIo`] that copies all values per call, as the ioctl
//!   does; the cache and the mapping table do the rest.
//! - `ioctl-veth`: the real `SIOCETHTOOL` ioctl on 8 veth netdevs (root).
//! - `spawn-ethtool`: `ethtool -S` spawned for the same 8 veth netdevs,
//!   output parsed (what an exporter that shells out does). veth has few
//!   counters, so this baseline is a lower bound of what 1,467 would cost.
//!
//! CPU = user + system time of this process and its children
//! (getrusage), divided by the number of samples.
//! Run: `cargo run --release -p roce-netdev --example ethtool_bench [samples]`

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use roce_netdev::ethtool::{
    answer, parse_ethtool_s, u32_at, Ioctl, ReplyBuf, StatsCache, ETHTOOL_GSTATS,
};
use roce_netdev::{EthtoolError, EthtoolIo};

const NETDEVS: usize = 8;

struct Recorded {
    listing: Vec<(String, u64)>,
}

impl EthtoolIo for Recorded {
    fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
        // the kernel copies every value out per call; so does `answer`
        if u32_at(buf.words(), 0) == ETHTOOL_GSTATS {
            if let Some(first) = self.listing.first_mut() {
                first.1 = first.1.wrapping_add(1);
            }
        }
        answer(netdev, buf, &self.listing)
    }
}

#[allow(unsafe_code)]
fn cpu(who: i32) -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn cpu_all() -> Duration {
    cpu(libc::RUSAGE_SELF) + cpu(libc::RUSAGE_CHILDREN)
}

fn per_sample(samples: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm: names read and resolved once
    let start = cpu_all();
    for _ in 0..samples {
        f();
    }
    (cpu_all() - start) / samples as u32
}

struct Netns(String);
impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[allow(unsafe_code)]
fn enter(ns: &str) -> bool {
    let Ok(file) = std::fs::File::open(format!("/run/netns/{ns}")) else {
        return false;
    };
    // SAFETY: setns on a valid descriptor moves only the calling thread.
    unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) == 0 }
}

fn main() {
    let samples: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let listing =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ethtool/mlx5-cx7.txt");
    let text = std::fs::read_to_string(&listing).expect("recorded listing");
    let pairs = parse_ethtool_s(&text);
    let counters = pairs.len();

    let mut devs: Vec<Recorded> = (0..NETDEVS)
        .map(|_| Recorded {
            listing: pairs.clone(),
        })
        .collect();
    let mut cache = StatsCache::new(vec![]);
    let names: Vec<String> = (0..NETDEVS).map(|i| format!("ens{i}f0np0")).collect();
    let mut mapped = 0;
    let ours = per_sample(samples, || {
        for (dev, name) in devs.iter_mut().zip(&names) {
            let (stats, _) = cache.sample(dev, name).expect("sample");
            mapped = stats.len();
        }
    });
    println!("mapped-{counters}: {NETDEVS} netdevs x {counters} counters ({mapped} mapped each): {:.1} us CPU per sample", ours.as_secs_f64() * 1e6);

    let ns = Netns(format!("roce-bench-{}", std::process::id()));
    if !sh(&["ip", "netns", "add", &ns.0]) {
        println!("ioctl-veth / spawn-ethtool: skipped (needs root and iproute2)");
        return;
    }
    for i in 0..NETDEVS {
        let (a, b) = (format!("bv{i}a"), format!("bv{i}b"));
        sh(&[
            "ip", "-n", &ns.0, "link", "add", &a, "type", "veth", "peer", "name", &b,
        ]);
        sh(&["ip", "-n", &ns.0, "link", "set", &a, "up"]);
        sh(&["ip", "-n", &ns.0, "link", "set", &b, "up"]);
    }
    let veths: Vec<String> = (0..NETDEVS).map(|i| format!("bv{i}a")).collect();
    let ns_name = ns.0.clone();
    // Both the ioctl and the spawned ethtool run from a thread inside the
    // namespace (a child inherits the thread's network namespace), so no
    // `ip netns exec` wrapper is measured.
    let result = std::thread::spawn(move || {
        if !enter(&ns_name) {
            return None;
        }
        let mut io = Ioctl::open().ok()?;
        let mut cache = StatsCache::new(vec![]);
        let ioctl = per_sample(samples, || {
            for v in &veths {
                let _ = cache.sample(&mut io, v);
            }
        });
        let mut lines = 0;
        let spawn = per_sample((samples / 10).max(5), || {
            for v in &veths {
                if let Ok(out) = Command::new("ethtool").args(["-S", v]).output() {
                    lines = parse_ethtool_s(&String::from_utf8_lossy(&out.stdout)).len();
                }
            }
        });
        Some((ioctl, spawn, lines))
    })
    .join()
    .ok()
    .flatten();
    let Some((ioctl, baseline, lines)) = result else {
        println!("ioctl-veth / spawn-ethtool: skipped (setns failed)");
        return;
    };
    println!(
        "ioctl-veth: {NETDEVS} veth netdevs: {:.1} us CPU per sample",
        ioctl.as_secs_f64() * 1e6
    );
    println!(
        "spawn-ethtool: {NETDEVS} x `ethtool -S` ({lines} counters each): {:.1} us CPU per sample",
        baseline.as_secs_f64() * 1e6
    );
    println!(
        "ratio: spawning ethtool -S costs {:.0}x the mapped {counters}-counter read",
        baseline.as_secs_f64() / ours.as_secs_f64().max(1e-9)
    );
}
