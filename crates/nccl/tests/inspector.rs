//! The Inspector parsers against records laid out as NCCL's
//! `ext-profiler/inspector` writes them (inspector.cc
//! `inspectorCompletedColl`, README output format v4.0 .. v4.3;
//! inspector_prom.cc for the Prometheus mode).

use roce_nccl::inspector::{
    parse_human_size, parse_prom_line, parse_record, ObjectSplitter, Record, RecordError,
    MAX_OBJECT,
};

/// One line as the plugin's JSON writer emits it (format v4.0).
const V40: &str = r#"{"header":{"id":"0x7f8c496ae9f661","rank":2,"n_ranks":16,"nnodes":2},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"profiler_plugin","dump_timestamp_us":1748030377748202,"hostname":"gpu-node-07","pid":1639453},"coll_perf":{"coll":"AllReduce","coll_sn":1407,"coll_msg_size_bytes":17179869184,"coll_exec_time_us":61974,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":277.210914,"coll_busbw_gbs":485.119099}}"#;

#[test]
fn a_collective_record() {
    let Record::Coll(c) = parse_record(V40.as_bytes()).expect("parses") else {
        panic!("not a collective")
    };
    assert_eq!(
        (c.coll.as_str(), c.rank, c.n_ranks, c.nnodes),
        ("AllReduce", 2, 16, 2)
    );
    assert_eq!(
        (c.hostname.as_str(), c.pid, c.format_version.as_str()),
        ("gpu-node-07", 1639453, "v4.0")
    );
    assert_eq!((c.coll_sn, c.msg_size_bytes), (1407, 17179869184));
    assert_eq!(
        (c.exec_time_us, c.algobw_gbs, c.busbw_gbs),
        (61974.0, 277.210914, 485.119099)
    );
}

#[test]
fn newer_records_with_algo_proto_and_verbose_traces_and_dump_stats() {
    // a later inspector.cc adds "coll_algo"/"coll_proto"; verbose mode adds
    // "event_trace_sn"/"event_trace_ts"; v4.3 adds a "dump_stats" record.
    let newer = r#"{"header":{"id":"0xe62dedaa97644a","rank":4,"n_ranks":8,"nnodes":1},"metadata":{"inspector_output_format_version":"v4.3","git_rev":"9019a1912-dirty","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1752867229276385,"hostname":"h","pid":438776},"coll_perf":{"coll":"ReduceScatter","coll_algo":"RING","coll_proto":"SIMPLE","coll_sn":1231,"coll_msg_size_bytes":2147483648,"coll_exec_time_us":41057,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":418.439467,"coll_busbw_gbs":366.134533,"event_trace_sn":{"coll_start_sn":1,"coll_stop_sn":2,"kernel_events":[{"channel_id":0,"kernel_start_sn":3,"kernel_stop_sn":48,"kernel_record_sn":47}]}}}"#;
    let Record::Coll(c) = parse_record(newer.as_bytes()).expect("parses") else {
        panic!()
    };
    assert_eq!(
        (c.coll.as_str(), c.busbw_gbs, c.format_version.as_str()),
        ("ReduceScatter", 366.134533, "v4.3")
    );
    let stats = r#"{"header":{"id":"0x7f8c496ae9f661","rank":2,"n_ranks":8,"nnodes":1},"metadata":{"inspector_output_format_version":"v4.3","hostname":"h","pid":1},"dump_stats":{"coll_records":1024,"coll_dropped_total":4096}}"#;
    assert_eq!(parse_record(stats.as_bytes()), Ok(Record::Other));
    let p2p = r#"{"header":{"id":"0x1","rank":0,"n_ranks":2,"nnodes":2},"metadata":{},"p2p_perf":{"p2p":"Send","p2p_sn":1,"p2p_peer":1,"p2p_msg_size_bytes":8}}"#;
    assert_eq!(parse_record(p2p.as_bytes()), Ok(Record::Other));
}

#[test]
fn bad_records_are_errors_not_panics() {
    assert_eq!(parse_record(b"{"), Err(RecordError::Json));
    assert_eq!(parse_record(b"{}"), Err(RecordError::MissingHeader));
    assert_eq!(parse_record(br#"{"header":{},"coll_perf":{"coll":"AllReduce","coll_msg_size_bytes":-1,"coll_busbw_gbs":1}}"#), Err(RecordError::Json));
    assert_eq!(parse_record(b"\xff\xfe"), Err(RecordError::Json));
}

#[test]
fn splitter_handles_lines_pretty_printing_pieces_and_oversize() {
    let pretty = "{\n  \"header\": {\n    \"id\": \"0x1\",\n    \"rank\": 0\n  },\n  \"s\": \"a } { \\\" brace\"\n}\n";
    let input = format!("{V40}\n{pretty}garbage between {V40}");
    let mut out = Vec::new();
    let mut s = ObjectSplitter::new(MAX_OBJECT);
    // in 7-byte pieces, as a tailer may hand them over
    for chunk in input.as_bytes().chunks(7) {
        s.feed(chunk, &mut |o| out.push(o.to_vec()));
    }
    assert_eq!(
        out.len(),
        3,
        "{:?}",
        out.iter()
            .map(|o| String::from_utf8_lossy(o).into_owned())
            .collect::<Vec<_>>()
    );
    assert_eq!(out[0], V40.as_bytes());
    assert!(serde_json::from_slice::<serde_json::Value>(&out[1]).is_ok());
    let mut small = ObjectSplitter::new(pretty.len() + 1);
    let mut n = 0;
    small.feed(input.as_bytes(), &mut |_| n += 1);
    assert_eq!(
        (n, small.oversized),
        (1, 2),
        "the two long objects are dropped, the short one kept"
    );
}

#[test]
fn prometheus_mode_lines() {
    // inspector_prom.cc: cached static labels then collective/coll_sn/timestamp/message_size, "%.6g".
    let line = r#"nccl_bus_bandwidth_gbs{comm_id="0xd152c00f111816",hostname="gpu-node-07",rank="4",slurm_job="unknown",slurm_job_id="unknown",nranks="16",n_nodes="2",gpu_device_id="GPU4",collective="AllReduce",coll_sn="228924",timestamp="2025-10-17T03:31:47Z",message_size="2.00GB"} 485.119"#;
    let s = parse_prom_line(line).expect("parses");
    assert_eq!(
        (s.metric.as_str(), s.collective.as_str(), s.value),
        ("nccl_bus_bandwidth_gbs", "AllReduce", 485.119)
    );
    assert_eq!(
        (s.rank, s.coll_sn, s.n_nodes, s.nranks),
        (Some(4), Some(228924), Some(2), Some(16))
    );
    assert_eq!(s.msg_size_bytes, Some(2 << 30));
    assert!(parse_prom_line("# HELP x").is_none());
    assert!(parse_prom_line("node_load1 3").is_none());
    assert!(parse_prom_line(r#"nccl_bus_bandwidth_gbs{collective="AllReduce} 1"#).is_none());
    assert!(parse_prom_line(r#"nccl_bus_bandwidth_gbs{collective="AllReduce"} NaN"#).is_none());
}

#[test]
fn human_sizes_as_the_plugin_formats_them() {
    // "%zuB" below 1 KiB, "%.2f" + KB/MB/GB/TB above (1024-based)
    assert_eq!(parse_human_size("512B"), Some(512));
    assert_eq!(parse_human_size("1.50KB"), Some(1536));
    assert_eq!(parse_human_size("256.00MB"), Some(256 << 20));
    assert_eq!(parse_human_size("16.00GB"), Some(16 << 30));
    assert_eq!(parse_human_size("-1.00GB"), None);
    assert_eq!(parse_human_size("1e400TB"), None);
    assert_eq!(parse_human_size("GB"), None);
}
