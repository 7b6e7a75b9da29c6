//! Fuzz target: what NCCL jobs write into the directories the NCCL source
//! reads (`crates/nccl`): debug-log lines (log.rs `parse_line`), Inspector
//! JSON through the object splitter (inspector.rs `ObjectSplitter`,
//! `parse_record`), Inspector Prometheus lines (`parse_prom_line`) and
//! nccl-tests' output (nccl_tests.rs `TestsParser`), all folded into the
//! aggregator, whose summary must stay within its caps.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use roce_nccl::aggregate::{Aggregator, AggregatorConfig};
use roce_nccl::inspector::{parse_prom_line, parse_record, ObjectSplitter, Record};
use roce_nccl::log::parse_line;
use roce_nccl::nccl_tests::{TestsParser, MAX_DEVICES, MAX_HOSTS};

fuzz_target!(|data: &[u8]| {
    let cfg = AggregatorConfig {
        max_keys: 8,
        max_processes: 4,
        max_samples: 16,
        busbw_min_bytes: 0,
        ..AggregatorConfig::default()
    };
    let mut agg = Aggregator::new(cfg);
    let now = Instant::now();
    // The tailer hands over lines as bytes; the source reads them lossily.
    let text = String::from_utf8_lossy(data);
    let mut tests = TestsParser::new("all_reduce_perf.out");
    for line in text.lines() {
        let parsed = parse_line(line);
        agg.log_line("fuzz", &parsed, now);
        if tests.line(line) {
            let run = tests.current();
            assert!(run.hosts.len() <= MAX_HOSTS && run.devices.len() <= MAX_DEVICES);
            assert!(run.largest.len() <= 16);
            agg.tests_run("fuzz", tests.finished, run, now);
        }
        if let Some(sample) = parse_prom_line(line) {
            assert!(sample.value.is_finite());
            agg.prom_sample(&sample, now);
        }
    }
    let mut splitter = ObjectSplitter::new(4096);
    for chunk in data.chunks(61) {
        splitter.feed(chunk, &mut |obj| {
            assert!(obj.len() <= 4096);
            if let Ok(Record::Coll(c)) = parse_record(obj) {
                agg.inspector_record(&c, now);
            }
        });
    }
    let s = agg.summary(now);
    assert!(s.connections.len() <= 8);
    assert!(s.versions.len() <= 16);
    assert!(s.job.tests.len() <= roce_nccl::aggregate::MAX_TESTS_RUNS);
    assert!(s.job.settings.len() <= roce_nccl::aggregate::JUDGED_SETTINGS.len());
    assert!(s
        .busbw
        .iter()
        .all(|b| b.min_gbs <= b.max_gbs && b.samples > 0));
    assert!(s
        .connections
        .iter()
        .all(|r| r.key.device.len() <= 64 * 4 && r.key.net.len() <= 64));
    assert!(!agg.summary(now + Duration::from_secs(86_400)).has_data());
});
