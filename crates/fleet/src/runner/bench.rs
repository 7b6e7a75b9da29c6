use super::port::xorshift;
use super::tests::simulate;
use super::*;
use crate::config::RailConfig;
use crate::peer_address::{AddressPolicy, PortSubnet};
use crate::peer_rails::Rails;
use roce_probe::peer::{PeerPort, Probe, ProbeOutcome, Responder, Served};
use std::net::{Ipv4Addr, Ipv6Addr};

/// A Prometheus answer for `nodes` nodes of 8 ports, as Prometheus
/// writes it.
fn prometheus_answer(nodes: usize) -> String {
    let mut out = String::from(r#"{"status":"success","data":{"resultType":"vector","result":["#);
    for n in 0..nodes {
        for rail in 0..8 {
            if n + rail > 0 {
                out.push(',');
            }
            out.push_str(&format!(
                r#"{{"metric":{{"__name__":"roce_peer_probe_endpoint_info","device":"mlx5_{rail}","device_index":"{rail}","gid":"::ffff:10.{rail}.{}.{}","gid_index":"3","instance":"10.250.{}.{}:9879","job":"roce_exporter","mtu":"4096","node":"gpu-node-{n:05}","port":"1","qpn":"{}","rail":"10.{rail}.0.0/16","subnet":"10.{rail}.0.0/16"}},"value":[1767225600.123,"1"]}}"#,
                n / 250,
                n % 250 + 1,
                n / 250,
                n % 250 + 1,
                // QPNs as a real fleet has them: no two alike.
                (xorshift((n * 8 + rail + 1) as u64) % 0xFF_FFF0) + 2
            ));
        }
    }
    out.push_str("]}}");
    out
}

#[test]
#[ignore = "a benchmark: bench/peer_discovery.py runs it"]
fn fleet_request_rates() {
    use std::io::Write as _;
    let refresh = Duration::from_secs(60);
    let hour = Duration::from_secs(3600);
    println!("BENCH mode nodes per_node_requests_per_hour fleet_requests_per_second baseline_fleet_requests_per_second");
    for nodes in [1000usize, 10_000] {
        // The per-peer documents every refresh (the baseline).
        let baseline = (nodes as u64 - 1) * (hour.as_secs() / refresh.as_secs());
        let fleet = |per_node: u64| per_node as f64 * nodes as f64 / 3600.0;
        println!(
            "BENCH every_refresh {nodes} {baseline} {:.1} {:.1}",
            fleet(baseline),
            fleet(baseline)
        );
        // The first hour (the whole fleet started at once: every node
        // walks every peer once), then a steady hour (hour 3 of 3: the
        // walk of 10,000 peers takes 67 minutes).
        let (three, two) = (hour * 3, hour * 2);
        let (docs, lists) = simulate(nodes - 1, refresh, hour, 0, 0, Duration::ZERO, true);
        println!(
            "BENCH documents_first_hour {nodes} {docs} {:.1} {:.1}",
            fleet(docs),
            fleet(baseline)
        );
        // The fleet's peak while it starts: the first minute, every node
        // reading peers that are themselves learning.
        let minute = Duration::from_secs(60);
        let (start, _) = simulate(nodes - 1, refresh, minute, 0, 0, Duration::ZERO, true);
        println!(
            "BENCH documents_start_minute {nodes} {} {:.1} {:.1}",
            start * 60,
            start as f64 * nodes as f64 / 60.0,
            fleet(baseline)
        );
        let (steady, _) = simulate(nodes - 1, refresh, three, 0, 0, two, false);
        println!(
            "BENCH documents_steady {nodes} {steady} {:.1} {:.1}",
            fleet(steady),
            fleet(baseline)
        );
        // SRV: the list is one DNS query per refresh, documents as above.
        println!(
            "BENCH srv_first_hour {nodes} {} {:.1} {:.1}",
            docs + lists,
            fleet(docs + lists),
            fleet(baseline)
        );
        println!(
            "BENCH srv_steady {nodes} {} {:.1} {:.1}",
            steady + lists,
            fleet(steady + lists),
            fleet(baseline)
        );
        // 1 % of the peers dead and 1 % whose probes keep failing: the
        // retries and refetches, in a steady hour.
        let (bad, _) = simulate(
            nodes - 1,
            refresh,
            three,
            nodes / 100,
            nodes / 100,
            two,
            false,
        );
        println!(
            "BENCH documents_steady_1pct_failing {nodes} {bad} {:.1} {:.1}",
            fleet(bad),
            fleet(baseline)
        );
        let queries = hour.as_secs() / refresh.as_secs();
        let answer = prometheus_answer(nodes);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(answer.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        let started = Instant::now();
        let parsed = crate::peer_endpoints::parse_query_response(answer.as_bytes()).unwrap();
        let parse = started.elapsed();
        assert_eq!(parsed.len(), nodes * 8);
        println!(
            "BENCH prometheus {nodes} {queries} {:.1} {:.1} answer_bytes={} gzip_bytes={} parse_ms={:.1}",
            fleet(queries),
            fleet(baseline),
            answer.len(),
            gz.len(),
            parse.as_secs_f64() * 1e3
        );
    }
}

/// A local port whose every probe is answered at once, and which waits
/// between probes by sleeping (the coordinator's cost is measured, not
/// the port's).
#[derive(Clone)]
struct QuietVerbs;
struct QuietPort;

impl PeerPort for QuietPort {
    fn local(&self) -> (Ipv6Addr, u32, u32) {
        (Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(), 7, 4096)
    }
    fn ping(
        &mut self,
        to: &Endpoint,
        _: &Probe,
        _: Duration,
        _: &mut Responder,
        _: &mut Served,
    ) -> ProbeOutcome {
        ProbeOutcome::Answered {
            rtt: Duration::from_micros(5),
            incarnation: to.incarnation,
        }
    }
    fn serve(&mut self, _: &mut Responder, _: &mut Served) {}
    fn idle(&mut self, timeout: Duration, _: &mut Responder, _: &mut Served) {
        std::thread::sleep(timeout);
    }
}

impl PeerVerbs for QuietVerbs {
    type Port = QuietPort;
    fn open_port(
        &mut self,
        _: &str,
        _: u8,
        _: u32,
    ) -> Result<QuietPort, roce_probe::verbs::OpenError> {
        Ok(QuietPort)
    }
}

/// Node `i`'s document: 8 ports on 8 rails (10.<rail>.<i/250>.<i%250+1>).
struct FleetDocs;

impl Fetch for FleetDocs {
    fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
        let i: usize = peer
            .host()
            .rsplit('.')
            .next()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0)
            + 250
                * peer
                    .host()
                    .split('.')
                    .nth(2)
                    .unwrap_or("0")
                    .parse::<usize>()
                    .unwrap_or(0);
        Ok((0..8u8)
            .map(|rail| Endpoint {
                node: format!("gpu-node-{i:05}"),
                device: format!("mlx5_{rail}"),
                device_index: u32::from(rail),
                port: 1,
                gid: Ipv4Addr::new(10, rail, (i / 250) as u8, (i % 250) as u8 + 1).to_ipv6_mapped(),
                gid_index: 3,
                qpn: 100 + i as u32,
                qkey: QKEY,
                mtu: 4096,
                subnet: Some(format!("10.{rail}.0.0/16")),
                rail: Some(format!("10.{rail}.0.0/16")),
                incarnation: i as u64 + 1,
                wire: roce_probe::peer_wire::WIRE_VERSION,
                learning: false,
            })
            .collect())
    }
}

/// utime + stime of this process's thread named `name`, seconds.
fn thread_cpu(name: &str) -> Option<f64> {
    let tick = 100.0; // USER_HZ
    for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
        let after = stat.rsplit_once(')')?.1;
        let f: Vec<&str> = after.split_whitespace().collect();
        let (u, s): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
        return Some((u + s) / tick);
    }
    None
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The coordinator's own CPU (its thread, `roce-peer-probe`) and the
/// runtime's memory with 1,000 and 10,000 peers of 8 ports each, once
/// the first walk is done: the real runner over a peer list of the
/// fleet's addresses, documents answered at once (the first walk as fast
/// as the fetch workers go), one local port on rail 0 whose probes are
/// answered at once. The list is read again every 10 s (6 times the
/// exporter's default), so the window holds its cost too.
#[test]
#[ignore = "a benchmark: bench/peer_probes.py runs it"]
fn coordinator_cost() {
    let window = Duration::from_secs(
        std::env::var("ROCE_BENCH_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(30),
    );
    // One size per process (ROCE_BENCH_NODES), so that the memory the
    // first size freed does not hide the growth of the second.
    let sizes: Vec<usize> = match std::env::var("ROCE_BENCH_NODES") {
        Ok(v) => v.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
        Err(_) => vec![1000, 10_000],
    };
    println!("BENCH coordinator peers endpoints walk_s cpu_percent rss_growth_kib");
    for nodes in sizes {
        let rss0 = rss_kib();
        let config = crate::config::PeerProbeConfig {
            enabled: true,
            peers: (0..nodes)
                .map(|i| format!("10.200.{}.{}:9879", i / 250, i % 250))
                .collect(),
            ..crate::config::PeerProbeConfig::default()
        };
        let settings = RunnerSettings {
            node: "bench".into(),
            probe: PeerSettings::default(),
            refresh: Duration::from_secs(10),
            fetch_timeout: Duration::from_secs(5),
            resolve: |_, _| Vec::new(),
            subnet_of: |g| {
                g.to_ipv4_mapped()
                    .map(|a| PortSubnet::of(a.into(), 16, true))
            },
            admission: Admission {
                rails: Rails::new(&RailConfig::default()).unwrap(),
                policy: AddressPolicy::default(),
                fabric: vec![PortSubnet::parse("10.0.0.0/8").unwrap()],
            },
            pace: FetchPace {
                burst: 1e6,
                starting: 1e6,
                running: 1e6,
            },
        };
        let started = Instant::now();
        let runner = PeerRunner::spawn(
            QuietVerbs,
            EndpointSource::Documents {
                list: Box::new(PeerList::new(&config, false)),
                fetcher: Arc::new(FleetDocs),
            },
            settings,
        )
        .unwrap();
        runner.set_targets(vec![LocalTarget {
            device: "mlx5_0".into(),
            port: 1,
            gid_index: 3,
            traffic_class: 0,
            device_index: 0,
            netdev: None,
        }]);
        loop {
            let (_, d) = runner.results();
            if d.peers_known == nodes && !d.learning {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "walk stuck: {d:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let walk = started.elapsed();
        // Settled: the last publication and the ports' first pass.
        std::thread::sleep(Duration::from_secs(3));
        let endpoints = runner.results().1.endpoints;
        let cpu0 = thread_cpu("roce-peer-probe").unwrap_or(0.0);
        let t0 = Instant::now();
        std::thread::sleep(window);
        let cpu = thread_cpu("roce-peer-probe").unwrap_or(0.0) - cpu0;
        let percent = 100.0 * cpu / t0.elapsed().as_secs_f64();
        println!(
            "BENCH coordinator {nodes} {endpoints} {:.1} {percent:.3} {}",
            walk.as_secs_f64(),
            rss_kib().saturating_sub(rss0)
        );
        drop(runner);
    }
}
