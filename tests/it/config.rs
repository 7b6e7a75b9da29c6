//! The YAML configuration: what parses, what is refused and where, and the
//! defaults a key given alone keeps.

use std::path::Path;
use std::time::Duration;

use roce_exporter::config::*;

#[test]
fn empty_and_comment_only_files_are_the_default() {
    assert_eq!(Config::parse("", "t").unwrap(), Config::default());
    assert_eq!(
        Config::parse("# nothing\n\n", "t").unwrap(),
        Config::default()
    );
}

#[test]
fn design_skeleton_parses() {
    let c = Config::parse(
        "sample_interval: 2s\ndevices: {include: [mlx5_*], exclude: [mlx5_1]}\n\
             netdevs: {extra: [bond0], export_raw_ethtool: [rx_vport_rdma_unicast_packets]}\n\
             probes: {enabled: true, interval: 10s, gid_index: auto}\n\
             expect: {mtu: 9000, pfc_priority: 3, link_rate_gbps: 400}\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.sample_interval, Duration::from_secs(2));
    assert_eq!(c.devices.exclude, vec!["mlx5_1"]);
    assert_eq!(c.probes.enabled, Toggle::On);
    assert_eq!(c.expect.pfc_priority, Some(3));
    assert_eq!(c.expect.link_rate_gbps, Some(400.0));
}

#[test]
fn keys_that_do_not_fit_together_are_refused_with_the_reason() {
    let msg = |text: &str| Config::parse(text, "t.yml").unwrap_err().to_string();
    assert_eq!(
        msg("expect: {devices: 0}\n"),
        "t.yml: expect.devices must be at least 1 (or a list of device names)"
    );
    let m = msg("rules: {disabled: [no_such_rule]}\n");
    assert!(
        m.starts_with("t.yml: rules.disabled: unknown rule \"no_such_rule\" (known: "),
        "{m}"
    );
}

#[test]
fn unknown_key_is_refused_with_line_and_column() {
    let e = Config::parse("sample_interval: 5s\ndevices:\n  inclde: [x]\n", "cfg.yml").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("line 3 column 3"), "{msg}");
    assert!(msg.contains("inclde"), "{msg}");
    assert!(msg.starts_with("cfg.yml:"), "{msg}");
}

#[test]
fn bad_values_are_refused() {
    for bad in [
        "sample_interval: five\n",
        "sample_interval: 0s\n",
        "sample_interval: 10ms\n",
        "expect: {pfc_priority: 9}\n",
        "probes: {gid_index: first}\n",
        "sources: {ethtool: maybe}\n",
        "web: {max_connections: 0}\n",
        "- a\n- b\n",
        "devices: {include: [\n",
    ] {
        assert!(Config::parse(bad, "t").is_err(), "accepted {bad:?}");
    }
}

/// Every numeric key refuses what has no meaning for it (a request cap
/// of 0 that would answer every request with 431, a link rate of `.nan`,
/// `-400` or `.inf`), at the value's line and column.
#[test]
fn meaningless_numbers_are_refused_at_their_line_and_column() {
    let top = |section: &str, key: &str, value: &str| {
        (
            format!("# a meaningless value\n{section}:\n  {key}: {value}\n"),
            3,
            key.len() + 5,
        )
    };
    let rule = |name: &str, key: &str, value: &str| {
        (
            format!("# a meaningless value\nrules:\n  {name}:\n    {key}: {value}\n"),
            4,
            key.len() + 7,
        )
    };
    let mut cases = Vec::new();
    for v in [".nan", "-400", ".inf", "-.inf", "0"] {
        cases.push(top("expect", "link_rate_gbps", v));
    }
    for v in ["0", "67", "65536"] {
        cases.push(top("expect", "mtu", v));
    }
    cases.push(top("expect", "pfc_priority", "8"));
    for v in ["0", "1", "1023"] {
        cases.push(top("web", "max_request_bytes", v));
    }
    cases.push(top("web", "max_connections", "0"));
    for name in [
        "retransmissions",
        "sequence_errors",
        "out_of_buffer",
        "ack_timeouts",
        "cnp_not_sent",
        "discards_growing",
    ] {
        for v in [".nan", "-1", ".inf"] {
            cases.push(rule(name, "per_second", v));
        }
    }
    for v in [".nan", "-1e-12", "2", ".inf"] {
        cases.push(rule("symbol_errors", "max_ber", v));
    }
    for (name, key) in [
        ("pfc_storm", "pause_ratio"),
        ("probe_failures", "max_ratio"),
    ] {
        for v in [".nan", "-0.1", "1.5", ".inf"] {
            cases.push(rule(name, key, v));
        }
    }
    for v in [".nan", "0.5", "0", "-3", ".inf"] {
        cases.push(rule("probe_latency_regression", "factor", v));
    }
    for v in ["0", "67", "65536"] {
        cases.push(rule("mtu_below_jumbo", "min_mtu", v));
    }
    for (yaml, line, column) in cases {
        let e = Config::parse(&yaml, "cfg.yml")
            .expect_err(&yaml)
            .to_string();
        // A value with a range names its key before it.
        let at = format!("cfg.yml: error: line {line} column {column}: ");
        assert!(
            e.starts_with(&at)
                && e[at.len()..]
                    .split(": ")
                    .any(|p| p.starts_with("expected ")),
            "{yaml:?}: {e}"
        );
    }
    let e = Config::parse("\nsample_interval: 10ms\n", "cfg.yml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2 column 18"), "{e}");

    // The edges that mean something are kept.
    let c = Config::parse(
        "expect: {link_rate_gbps: 2.5, mtu: 68, pfc_priority: 0}\n\
             web: {max_request_bytes: 1024, max_connections: 1}\n\
             rules: {retransmissions: {per_second: 0}, symbol_errors: {max_ber: 0},\n\
             \x20 pfc_storm: {pause_ratio: 1}, probe_failures: {max_ratio: 0},\n\
             \x20 probe_latency_regression: {factor: 1}, mtu_below_jumbo: {min_mtu: 65535}}\n\
             sample_interval: 100ms\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.expect.link_rate_gbps, Some(2.5));
    assert_eq!(c.web.max_request_bytes, 1024);
    assert_eq!(c.rules.pfc_storm.pause_ratio, 1.0);
    assert_eq!(c.rules.mtu_below_jumbo.min_mtu, 65535);
    let c = Config::parse("expect: {link_rate_gbps: ~, mtu: null}\n", "t").unwrap();
    assert_eq!((c.expect.link_rate_gbps, c.expect.mtu), (None, None));
}

/// Found by fuzz/fuzz_targets/config_yaml.rs: these were accepted and
/// then panicked on the first tick ("overflow when adding durations" in
/// the sampler's history retention, "overflow when adding duration to
/// instant" in its schedule, in the probe schedule and in hyper's header
/// deadline); `netlink_timeout` is added to the clock the same way by
/// every netlink request.
#[test]
fn durations_too_long_to_add_to_the_clock_are_refused() {
    for crash in [
        "sample_interval: 18446744073709551615s\n",
        "sample_interval: 500000000000y\n",
        "probes: {interval: 500000000000y}\n",
        "web: {header_read_timeout: 500000000000y}\n",
        "sources: {netlink_timeout: 500000000000y}\n",
    ] {
        let e = Config::parse(crash, "t").expect_err(crash).to_string();
        assert!(e.contains("expected a duration from"), "{crash:?}: {e}");
    }
    for crash in [
        "rules: {hold: 18446744073709551615s}\n",
        "rules: {link_flap: {window: 18446744073709551615s}}\n",
    ] {
        let e = Config::parse(crash, "t").expect_err(crash).to_string();
        assert!(e.contains("longest supported"), "{crash:?}: {e}");
    }
    // The longest accepted everywhere at once still runs.
    let year = "365d";
    let c = Config::parse(
            &format!(
                "sample_interval: 1h\nprobes: {{interval: 1h}}\n\
                 web: {{header_read_timeout: 5m}}\nrules: {{hold: {year}, link_flap: {{window: {year}}}}}\n"
            ),
            "t",
        )
        .unwrap();
    let sampler = roce_exporter::sampler::Sampler::new(Vec::new(), &c);
    let (tx, rx) = std::sync::mpsc::channel();
    drop(tx);
    sampler.run(c.sample_interval, rx, |_, _| {});
}

#[test]
fn a_rule_key_given_alone_keeps_the_other_defaults() {
    let c = Config::parse(
        "rules: {retransmissions: {per_second: 50}, link_flap: {window: 1m}}\n",
        "t",
    )
    .unwrap();
    let d = RulesConfig::default();
    assert_eq!(c.rules.retransmissions.per_second, 50.0);
    assert_eq!(c.rules.retransmissions.window, d.retransmissions.window);
    assert_eq!(c.rules.link_flap.window, Duration::from_secs(60));
    assert_eq!(c.rules.symbol_errors, d.symbol_errors);
    let c = Config::parse("rules: {symbol_errors: {max_ber: 1e-10}}\n", "t").unwrap();
    assert_eq!(c.rules.symbol_errors.max_ber, 1e-10);
    assert_eq!(c.rules.symbol_errors.window, d.symbol_errors.window);
    let e = Config::parse("rules: {link_flap: {per_second: 3}}\n", "t")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rules.link_flap.per_second is not a setting"),
        "{e}"
    );
    let e = Config::parse("rules:\n  retransmissions: {windw: 1m}\n", "t")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2") && e.contains("windw"), "{e}");
    let e = Config::parse("rules:\n  hold: soon\n", "t")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 2") && e.contains("invalid duration"),
        "{e}"
    );
}

/// A key under a rule that does not take it is reported at the key
/// itself: the merge that checked it after parsing pointed at the start
/// of `rules:` (line 2 column 3 here).
#[test]
fn a_key_under_the_wrong_rule_is_refused_at_its_line_and_column() {
    let e = Config::parse(
        "rules:\n  pfc_storm:\n    window: 1m\n    max_ber: 1e-9\n",
        "cfg.yml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(
            "cfg.yml: error: line 4 column 5: rules.pfc_storm.max_ber is not a setting \
                 of this rule (it takes: window, pause_ratio)"
        ),
        "{e}"
    );
    let e = Config::parse(
        "rules: {retransmissions: {window: 1m, max_ratio: 0.5}}\n",
        "cfg.yml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("cfg.yml: error: line 1 column 39: rules.retransmissions.max_ratio"),
        "{e}"
    );
}

#[test]
fn toggles_and_gid_index() {
    let c = Config::parse(
        "sources: {rdma_netlink: false, dcb: true}\nprobes: {gid_index: 3}\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.sources.rdma_netlink, Toggle::Off);
    assert_eq!(c.sources.dcb, Toggle::On);
    assert_eq!(c.sources.ethtool, Toggle::Auto);
    assert_eq!(c.probes.gid_index, GidIndex::Index(3));
    assert!(Toggle::Auto.enabled(true) && !Toggle::Auto.enabled(false));
}

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
    assert!(msg("peer_probes: {fetch_timeout: 5m}\n").contains("10ms to 1m"));
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
    assert_eq!(c.load_test, d.load_test);
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

/// The YAML setting `key` (dotted) to `value`, with what the section needs
/// to parse around it.
fn setting(key: &str, value: &str) -> String {
    let parts: Vec<&str> = key.split('.').collect();
    let mut yaml = String::new();
    for (depth, part) in parts.iter().enumerate() {
        let indent = "  ".repeat(depth);
        if depth + 1 == parts.len() {
            yaml.push_str(&format!("{indent}{part}: {value}\n"));
        } else {
            yaml.push_str(&format!("{indent}{part}:\n"));
            if *part == "prometheus" {
                yaml.push_str(&format!("{indent}  url: http://127.0.0.1:9090\n"));
            }
        }
    }
    yaml
}

/// A value just past `d` as humantime writes it.
fn plus_a_nanosecond(d: Duration) -> String {
    humantime::format_duration(d + Duration::from_nanos(1)).to_string()
}

#[test]
fn every_limit_takes_its_floor_and_ceiling_and_refuses_past_them_naming_the_range() {
    use roce_exporter::config::limits::{self, Limit};
    for limit in limits::ALL {
        let key = limit.key();
        let (floor, ceiling, below, above) = match limit {
            Limit::Duration(l) => (
                humantime::format_duration(l.min).to_string(),
                humantime::format_duration(l.max).to_string(),
                (l.min > Duration::from_nanos(1)).then(|| {
                    humantime::format_duration(l.min - Duration::from_nanos(1)).to_string()
                }),
                plus_a_nanosecond(l.max),
            ),
            Limit::Count(l) => (
                l.min.to_string(),
                l.max.to_string(),
                l.min.checked_sub(1).map(|v| v.to_string()),
                (u128::from(l.max) + 1).to_string(),
            ),
        };
        for ok in [&floor, &ceiling] {
            let c = Config::parse(&setting(key, ok), "t")
                .unwrap_or_else(|e| panic!("{key}: {ok} refused: {e}"));
            assert!(limit.holds(&c), "{key}: {ok}");
            assert_eq!(limits::check(&c), Ok(()));
        }
        for bad in below.iter().chain([&above]) {
            let yaml = setting(key, bad);
            let e = Config::parse(&yaml, "t").expect_err(&yaml).to_string();
            let want = format!("{key}: expected ");
            assert!(e.contains(&want), "{yaml}: {e}");
            assert!(e.contains(&limit.range()), "{yaml}: {e}");
        }
    }
    // What the issue found accepted: each refused, with its range.
    for (yaml, range) in [
        (
            "web: {max_request_bytes: 9223372036854775808}\n",
            "1024 to 1048576 bytes",
        ),
        (
            "nccl: {max_bytes_per_read: 4611686018427387904}\n",
            "65536 to 67108864 bytes",
        ),
        ("nccl: {interval: 1ns}\n", "100ms to 1h"),
    ] {
        let e = Config::parse(yaml, "t").expect_err(yaml).to_string();
        assert!(e.contains(range), "{yaml}: {e}");
    }
    // Every default is inside its range.
    assert_eq!(limits::check(&Config::default()), Ok(()));
}

#[test]
fn a_reload_past_a_ceiling_is_refused_as_a_start_is() {
    let dir = std::env::temp_dir().join(format!("roce-config-limits-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("roce_exporter.yml");
    std::fs::write(&file, "nccl:\n  max_bytes_per_read: 67108865\n").unwrap();
    // Config::load is what the start and every SIGHUP call.
    let e = Config::load(&file).unwrap_err().to_string();
    assert!(
        e.contains("nccl.max_bytes_per_read: expected 65536 to 67108864 bytes"),
        "{e}"
    );
    assert!(e.contains("line 2 column 23"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_limits_reference_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/limits.md");
    let want = roce_exporter::config::limits::reference();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "docs/limits.md is stale: UPDATE_GOLDEN=1 cargo test --test it config::the_limits_reference_is_current"
    );
}
