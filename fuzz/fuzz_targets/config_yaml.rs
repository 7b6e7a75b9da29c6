//! Fuzz target: the YAML configuration (`src/config.rs` `Config::parse`:
//! serde-saphyr, the custom toggle / GID index / duration fields, the rule
//! thresholds and validation), then what the exporter does first with an
//! accepted configuration: a sampler built and run once with its interval
//! and history retention, the probe schedule on `probes.interval`, the
//! device filter's globs, and one HTTP request served with its `web`
//! limits. An accepted configuration must not crash any of them.
#![no_main]

use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use libfuzzer_sys::fuzz_target;
use roce_exporter::app::App;
use roce_exporter::config::Config;
use roce_exporter::exposition::BuildInfo;
use roce_exporter::sampler::Sampler;
use roce_exporter::server::{self, ServeOptions};
use roce_exporter::snapshot::Snapshot;
use roce_exporter::webconfig::WebConfig;
use roce_probe::schedule::Schedule;
use roce_probe::ProbeTarget;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a tokio runtime")
    })
}

fn serve_one_request(config: &Config) {
    let app = Arc::new(App::new(
        BuildInfo::current(config.sample_interval),
        Arc::new(Snapshot {
            sequence: 1,
            taken_at: Some(SystemTime::now()),
            ..Snapshot::default()
        }),
    ));
    let options = ServeOptions::new(config.web.clone());
    runtime().block_on(async move {
        let (mut client, conn) = tokio::io::duplex(64 * 1024);
        let serve = tokio::spawn(async move {
            server::serve_stream(conn, app, &options, Arc::new(WebConfig::plain())).await
        });
        let _ = client
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
            .await;
        let _ = client.shutdown().await;
        let mut response = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut response));
        assert!(
            read.await.is_ok(),
            "the server kept a closed connection open"
        );
        if let Err(e) = serve.await {
            std::panic::resume_unwind(e.into_panic());
        }
    });
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::parse(text, "fuzz.yml") else {
        return;
    };
    // An accepted configuration holds every limit (docs/limits.md).
    assert_eq!(roce_exporter::config::limits::check(&config), Ok(()));

    // The sampler as main builds it, run for one tick: the control channel
    // is already closed, so it samples, schedules the next tick and returns.
    let sampler = Sampler::new(Vec::new(), &config);
    let (tx, rx) = mpsc::channel();
    drop(tx);
    let mut published = 0;
    sampler.run(config.sample_interval, rx, |_, _| published += 1);
    assert_eq!(published, 1);

    // The probe thread's schedule.
    let mut schedule = Schedule::new(config.probes.interval, 7);
    let now = Instant::now();
    let target = ProbeTarget::loopback("mlx5_0", 1, 3);
    schedule.retain(std::slice::from_ref(&target), now);
    schedule.done(&target, now);
    let _ = schedule.next_due();

    let filter = roce_rdma::DeviceFilter {
        include: config.devices.include.clone(),
        exclude: config.devices.exclude.clone(),
    };
    let _ = filter.allows("mlx5_0");

    let _ = config.rules.longest_window();
    serve_one_request(&config);
});
