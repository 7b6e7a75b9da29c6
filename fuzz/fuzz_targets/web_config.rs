//! Fuzz target: the web configuration (`crates/web/src/webconfig.rs`
//! `WebConfig::parse`: exporter-toolkit YAML, TLS settings with real
//! certificate, key and CA files, bcrypt hashes, extra headers), then the
//! basic-auth check of an accepted configuration against an
//! `Authorization` header from the input (`WebConfig::authorize`).
//!
//! Input: the YAML, then optionally a NUL and the header value. File names
//! resolve in a scratch folder holding `server.crt`, `server.key`, `ca.crt`
//! (a self-signed CA that is also the server certificate), `empty.pem` and
//! `garbage.pem`; inputs that could name a path outside it ('/' or a YAML
//! escape) are skipped, so the fuzzer never reads the host's files.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use libfuzzer_sys::fuzz_target;
use roce_exporter::webconfig::WebConfig;

fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("roce-fuzz-webconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .expect("certificate parameters");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = p.self_signed(&key).expect("a certificate");
        let write = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text).expect("scratch file");
        };
        write("server.crt", &cert.pem());
        write("ca.crt", &cert.pem());
        write("server.key", &key.serialize_pem());
        write("empty.pem", "");
        write(
            "garbage.pem",
            "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n",
        );
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let (yaml, auth) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    let Ok(text) = std::str::from_utf8(yaml) else {
        return;
    };
    if text.contains(['/', '\\']) {
        return;
    }
    let Ok(config) = WebConfig::parse(text, "web.yml", scratch()) else {
        return;
    };
    let _ = config.tls();
    let _ = config.headers();
    let mut headers = HeaderMap::new();
    if let Some(value) = auth.and_then(|a| HeaderValue::from_bytes(a).ok()) {
        headers.insert(AUTHORIZATION, value);
    }
    let first = config.authorize(&headers);
    // A second check of the same credentials takes the cache, with the
    // same answer.
    assert_eq!(config.authorize(&headers), first);
    if !config.requires_auth() {
        assert!(first);
    }
});
