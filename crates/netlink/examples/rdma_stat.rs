//! Prints every RDMA device the kernel lists over netlink and the hardware
//! counters of each port, one line per port in the layout of
//! `rdma statistic show` so the two can be compared line by line.
//! Exits 1 when netlink is unavailable or a query fails.
//!
//! `rdma_stat --probe` also asks for an unknown device index and a port
//! past the last one, and times repeated STAT_GET requests, to show how the
//! kernel refuses and what one query costs.

use std::time::Duration;

use roce_netlink::rdma::{list_devices, port_hw_counters};
use roce_netlink::{Protocol, Socket};

fn main() {
    let mut sock = match Socket::open(Protocol::Rdma, Duration::from_secs(2)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("open: {e}");
            std::process::exit(1);
        }
    };
    let devices = match list_devices(&mut sock) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("list_devices: {e}");
            std::process::exit(1);
        }
    };
    println!("devices: {}", devices.len());
    for d in &devices {
        println!("dev {} {} ports {}", d.index, d.name, d.port_count);
    }
    let mut failed = false;
    for d in &devices {
        for port in 1..=d.port_count {
            match port_hw_counters(&mut sock, d.index, port) {
                Ok(counters) => {
                    let mut line = format!("link {}/{} ", d.name, port);
                    for c in &counters {
                        line.push_str(&format!("{} {} ", c.name, c.value));
                    }
                    println!("{line}");
                }
                Err(e) => {
                    failed = true;
                    eprintln!("stat {}/{port}: {e}", d.name);
                }
            }
        }
    }
    if std::env::args().any(|a| a == "--probe") {
        if let Some(d) = devices.first() {
            let unknown = port_hw_counters(&mut sock, u32::MAX - 1, 1);
            println!("probe unknown device index: {unknown:?}");
            let past = port_hw_counters(&mut sock, d.index, d.port_count + 1);
            println!("probe port {} of {}: {past:?}", d.port_count + 1, d.name);
            let ok = port_hw_counters(&mut sock, d.index, 1).map(|c| c.len());
            println!("probe same socket afterwards: {ok:?}");
            let n = 200u32;
            let start = std::time::Instant::now();
            for _ in 0..n {
                if port_hw_counters(&mut sock, d.index, 1).is_err() {
                    failed = true;
                }
            }
            println!(
                "probe {n} STAT_GET on {}/1: {:.1} us each (TCG guest, informational)",
                d.name,
                start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
            );
        }
    }
    if failed {
        std::process::exit(1);
    }
}
