use super::port::xorshift;
use super::tests::simulate;
use super::*;

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
