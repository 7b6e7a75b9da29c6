use super::*;

#[test]
fn peer_probes_are_off_by_default_and_take_their_keys() {
    assert!(!Config::default().peer_probes.enabled);
    let c = Config::parse(
        "peer_probes:\n  enabled: true\n  peers: [node-b:9879, https://node-c:9879]\n  \
             dns: exporters.example:9879\n  file: /etc/peers.txt\n  all_to_all: true\n  \
             packets_per_second: 10\n  sample: 4\n  timeout: 200ms\n  refresh: 30s\n",
        "test",
    )
    .unwrap();
    let p = &c.peer_probes;
    assert!(p.enabled && p.all_to_all);
    assert_eq!(p.peers, ["node-b:9879", "https://node-c:9879"]);
    assert_eq!(p.dns.as_deref(), Some("exporters.example:9879"));
    assert_eq!((p.packets_per_second, p.sample), (10, 4));
    assert_eq!(p.timeout, Duration::from_millis(200));
    assert!(Config::parse("peer_probes: {bogus: 1}\n", "test").is_err());
}

#[test]
fn peer_probe_keys_that_cannot_work_together_are_refused() {
    let msg = |text: &str| Config::parse(text, "t.yml").unwrap_err().to_string();
    // Credentials are never sent over plain http.
    let m = msg("peer_probes:\n  peers: [http://node-b:9879]\n  username: prober\n  password_file: /p\n  tls_ca_file: /ca.pem\n");
    assert!(m.contains("never sent over plain http"), "{m}");
    let m = msg("peer_probes:\n  peers: [node-b:9879]\n  username: prober\n  password_file: /p\n");
    assert!(m.contains("without tls_ca_file"), "{m}");
    let m = msg("peer_probes:\n  srv: [_m._tcp.roce.monitoring.svc.cluster.local]\n  username: prober\n  password_file: /p\n");
    assert!(m.contains("without tls_ca_file"), "{m}");
    let m = msg("peer_probes:\n  username: prober\n");
    assert!(m.contains("go together"), "{m}");
    // https peers with credentials and a CA: fine.
    Config::parse(
            "peer_probes:\n  peers: [node-b:9879, https://node-c:9879]\n  username: prober\n  password_file: /p\n  tls_ca_file: /ca.pem\n",
            "t",
        )
        .unwrap();
    // Prometheus: one source of endpoints; no credentials over http.
    let m = msg("peer_probes:\n  peers: [node-b:9879]\n  prometheus: {url: 'http://prom:9090'}\n");
    assert!(m.contains("replaces the peer list"), "{m}");
    let m = msg("peer_probes:\n  prometheus: {url: 'http://prom:9090', bearer_token_file: /t}\n");
    assert!(m.contains("never sent over plain http"), "{m}");
    let m = msg("peer_probes:\n  prometheus: {url: 'https://prom:9090'}\n");
    assert!(m.contains("tls_ca_file"), "{m}");
    let m = msg("peer_probes:\n  prometheus: {url: 'prom:9090'}\n");
    assert!(m.contains("prometheus.url"), "{m}");
    let c = Config::parse(
            "peer_probes:\n  prometheus:\n    url: https://prom.example:9090/prometheus\n    query: 'roce_peer_probe_endpoint_info{job=\"roce\"}'\n    tls_ca_file: /ca.pem\n    bearer_token_file: /token\n    timeout: 20s\n",
            "t",
        )
        .unwrap();
    let p = c.peer_probes.prometheus.unwrap();
    assert_eq!(
        (p.timeout, p.max_bytes),
        (Duration::from_secs(20), 64 << 20)
    );
    // SRV names and rails are checked where they are parsed.
    assert!(msg("peer_probes: {srv: ['not a name']}\n").contains("not a DNS name"));
    assert!(msg("peer_probes: {fetch_timeout: 5m}\n").contains("60s"));
    let m = msg("peer_probes: {rails: {by: netdev}}\n");
    assert!(m.contains("netdev_pattern"), "{m}");
    let m = msg("peer_probes: {rails: {by: networks, networks: {rail0: 10.0.0.1/16}}}\n");
    assert!(m.contains("not an IPv4 network"), "{m}");
    let c = Config::parse(
            "peer_probes:\n  rails: {by: networks, networks: {rail0: 10.0.0.0/16, rail1: 10.1.0.0/16}}\n",
            "t",
        )
        .unwrap();
    assert_eq!(c.peer_probes.rails.networks.len(), 2);
}

/// The documented example must stay valid and describe the defaults.
#[test]
fn example_config_parses_and_shows_the_defaults() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/roce_exporter.yml");
    let c = Config::load(Path::new(path)).unwrap();
    let d = Config::default();
    assert_eq!(c.sample_interval, d.sample_interval);
    assert_eq!(c.devices, d.devices);
    assert_eq!(c.sources, d.sources);
    assert_eq!(c.probes, d.probes);
    assert_eq!(c.peer_probes, d.peer_probes);
    assert_eq!(c.web, d.web);
    assert_eq!(c.rules, d.rules);
    assert_eq!(c.metrics, d.metrics);
    assert_eq!(c.lldp, d.lldp);
    assert_eq!(c.expect.mtu, Some(9000));
    assert_eq!(
        c.nccl,
        NcclConfig {
            log_dir: Some("/var/log/nccl".into()),
            inspector_dir: Some("/var/lib/nccl-inspector".into()),
            ..d.nccl
        }
    );
}

#[test]
fn metrics_in_the_config_switch_groups_and_refuse_unknown_names() {
    use roce_exposition::groups::{Group, Groups};
    let c = Config::parse("metrics:\n  hw_stat: false\n  pcie_hops: true\n", "test").unwrap();
    assert!(!c.metrics.is_on(Group::HwStat));
    assert!(c.metrics.is_on(Group::PcieHops));
    assert!(
        c.metrics.is_on(Group::Gids),
        "unnamed groups keep their default"
    );
    assert!(!c.metrics.is_on(Group::IdlePriorities));
    let e = Config::parse("metrics:\n  gids: true\n  pcie_hop: true\n", "test").unwrap_err();
    assert!(e.to_string().contains("pcie_hop"), "{e}");
    assert!(Config::parse("metrics:\n  gids: 3\n", "test").is_err());
    assert_eq!(Config::default().metrics, Groups::default());
}
