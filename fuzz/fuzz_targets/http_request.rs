//! Fuzz target: HTTP request handling, end to end through the real server
//! code (`crates/web/src/connection.rs` `serve_stream`: the same hyper HTTP/1.1 settings,
//! header size limit, routing, method checks, body refusal, `Accept` and
//! `Accept-Encoding` negotiation, basic auth and extra headers that every
//! accepted connection gets), over an in-memory pipe to a small fixed App.
//!
//! Input: one byte of settings (bit 0: basic auth on, bit 1: extra response
//! headers, bits 2-3: request size limit), then the bytes the client sends;
//! the client then closes its side and reads the answer to the end.
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use libfuzzer_sys::fuzz_target;
use roce_exporter::app::App;
use roce_exporter::config::WebLimits;
use roce_exporter::exposition::BuildInfo;
use roce_exporter::server::{self, ServeOptions};
use roce_exporter::snapshot::Snapshot;
use roce_exporter::webconfig::WebConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Fixed {
    rt: tokio::runtime::Runtime,
    app: Arc<App>,
    /// Indexed by the settings' low two bits.
    web: [Arc<WebConfig>; 4],
}

fn fixed() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a tokio runtime");
        let snapshot = Snapshot {
            sequence: 3,
            taken_at: Some(SystemTime::now()),
            ..Snapshot::default()
        };
        let app = Arc::new(App::new(
            BuildInfo::current(Duration::from_secs(5)),
            Arc::new(snapshot),
        ));
        // Cost 4, the lowest bcrypt allows: the check stays cheap.
        let hash = bcrypt::hash("secret", 4).expect("a bcrypt hash");
        let users = format!("basic_auth_users:\n  prometheus: '{hash}'\n");
        let headers = "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    Strict-Transport-Security: max-age=31536000\n";
        let parse = |text: String| {
            Arc::new(
                WebConfig::parse(&text, "fuzz-web.yml", std::path::Path::new("."))
                    .expect("the fixed web configs are valid"),
            )
        };
        let web = [
            Arc::new(WebConfig::plain()),
            parse(users.clone()),
            parse(headers.to_string()),
            parse(format!("{users}{headers}")),
        ];
        Fixed { rt, app, web }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&settings, request)) = data.split_first() else {
        return;
    };
    let f = fixed();
    let web = f.web[usize::from(settings & 3)].clone();
    let max_request_bytes = match (settings >> 2) & 3 {
        0 => 16 * 1024,
        1 => 1024,
        2 => 64,
        _ => 1024 * 1024,
    };
    let mut options = ServeOptions::new(WebLimits {
        max_connections: 4,
        header_read_timeout: Duration::from_secs(5),
        max_request_bytes,
        ..WebLimits::default()
    });
    options.close_grace = Duration::from_secs(1);
    let app = f.app.clone();
    let request = request.to_vec();
    f.rt.block_on(async move {
        let (client, conn) = tokio::io::duplex(16 * 1024);
        let serve = tokio::spawn(async move {
            server::serve_stream(conn, app, &options, web).await;
        });
        let (mut rd, mut wr) = tokio::io::split(client);
        let write = async move {
            // The server may close first (a refused request): not an error.
            let _ = wr.write_all(&request).await;
            let _ = wr.shutdown().await;
        };
        let read = async move {
            let mut response = Vec::new();
            let _ = (&mut rd)
                .take(64 * 1024 * 1024)
                .read_to_end(&mut response)
                .await;
            response
        };
        let both = async { tokio::join!(write, read).1 };
        let response = tokio::time::timeout(Duration::from_secs(20), both)
            .await
            .expect("the server kept a connection open after the client closed it");
        if !response.is_empty() {
            assert!(
                response.starts_with(b"HTTP/1.1 ") || response.starts_with(b"HTTP/1.0 "),
                "not an HTTP response: {:?}",
                String::from_utf8_lossy(&response[..response.len().min(64)])
            );
        }
        if let Err(e) = serve.await {
            std::panic::resume_unwind(e.into_panic());
        }
    });
});
