//! `--web.config.file` against real sockets on 127.0.0.1: TLS served with
//! the configured certificate, wrong CA refused, mutual TLS, TLS 1.1
//! refused, basic auth, certificate rotation without restart, an invalid
//! file at start (exit status 2) and at run time (old one kept).
//! Certificates are made at test time with rcgen in a fresh directory; no
//! private key is committed. Clients are blocking rustls clients on the test
//! thread; the server runs on its own tokio runtime.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use roce_exporter::app::App;
use roce_exporter::config::WebLimits;
use roce_exporter::exposition::BuildInfo;
use roce_exporter::server::{self, ServeOptions};
use roce_exporter::snapshot::Snapshot;
use roce_exporter::webconfig::WebConfigWatcher;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The generous bound for "eventually": nothing here should come near it.
const EVENTUALLY: Duration = Duration::from_secs(15);

/// A fresh directory for one test's files.
fn temp_dir(name: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("roce-tls-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Replaces a file the way a certificate manager does: write aside, rename.
fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let pem = p.self_signed(&key).unwrap().pem();
        Ca {
            issuer: Issuer::new(p, key),
            pem,
        }
    }

    /// A leaf certificate and its key, PEM.
    fn leaf(&self, name: &str, client: bool) -> (String, String) {
        let mut p = CertificateParams::new(vec![name.to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A CA, a server certificate for `localhost` and a web config in `dir`.
fn tls_files(dir: &Path, ca: &Ca, extra: &str) -> PathBuf {
    let (cert, key) = ca.leaf("localhost", false);
    std::fs::write(dir.join("server.crt"), cert).unwrap();
    std::fs::write(dir.join("server.key"), key).unwrap();
    let config = dir.join("web.yml");
    // Relative names: resolved against the web config's directory.
    std::fs::write(
        &config,
        format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{extra}"),
    )
    .unwrap();
    config
}

/// The server runs until the test drops this (its runtime's tasks are
/// cancelled with it).
struct Server {
    #[allow(dead_code)]
    runtime: tokio::runtime::Runtime,
    addr: SocketAddr,
}

fn start(web_config: &Path) -> Server {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let watcher = WebConfigWatcher::load(web_config).expect("valid web config");
    let listeners = runtime
        .block_on(server::bind(&["127.0.0.1:0".to_string()]))
        .unwrap();
    let addr = listeners[0].local_addr().unwrap();
    let app = Arc::new(App::new(
        BuildInfo::current(Duration::from_secs(5)),
        Arc::new(Snapshot::default()),
    ));
    let mut options = ServeOptions::new(WebLimits::default());
    options.web_config = Some(Arc::new(watcher));
    runtime.spawn(server::serve_with(
        listeners,
        app,
        options,
        std::future::pending(),
    ));
    Server { runtime, addr }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    head: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

fn request_bytes(path: &str, auth: Option<&str>) -> Vec<u8> {
    let mut r = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some(a) = auth {
        r.push_str(&format!("Authorization: {a}\r\n"));
    }
    r.push_str("\r\n");
    r.into_bytes()
}

fn parse_reply(bytes: &[u8]) -> Result<Reply, String> {
    if bytes.is_empty() {
        return Err("empty response".into());
    }
    let text = String::from_utf8_lossy(bytes);
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {head:?}"))?;
    Ok(Reply { status, head })
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, EVENTUALLY).unwrap();
    s.set_read_timeout(Some(EVENTUALLY)).unwrap();
    s.set_write_timeout(Some(EVENTUALLY)).unwrap();
    s
}

/// Plain HTTP GET.
fn http_get(addr: SocketAddr, path: &str, auth: Option<&str>) -> Reply {
    let mut s = connect(addr);
    s.write_all(&request_bytes(path, auth)).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_reply(&buf).unwrap()
}

/// HTTPS GET trusting `ca_pem`, with a client certificate if given. Any
/// handshake or read failure is an `Err` with rustls's words.
fn https_get(
    addr: SocketAddr,
    ca_pem: &str,
    client: Option<&(String, String)>,
    path: &str,
) -> Result<Reply, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, connect(addr));
    tls.write_all(&request_bytes(path, None))
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    match tls.read_to_end(&mut buf) {
        Ok(_) => {}
        // A peer that closes without close_notify after a full response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !buf.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    parse_reply(&buf)
}

/// Retries `f` until it returns `Some` (changes on disk are looked at on
/// new connections, at most once a second).
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < EVENTUALLY, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn serves_the_configured_certificate_and_refuses_a_wrong_ca() {
    let dir = temp_dir("serve");
    let ca = Ca::new("test CA");
    let server = start(&tls_files(&dir, &ca, ""));
    let reply = https_get(server.addr, &ca.pem, None, "/metrics").unwrap();
    assert_eq!(reply.status, 200);

    let other = Ca::new("other CA");
    let err = https_get(server.addr, &other.pem, None, "/metrics").unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");

    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut s = connect(server.addr);
    s.write_all(&request_bytes("/metrics", None)).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(!buf.starts_with(b"HTTP/"), "{buf:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mutual_tls_required_and_verified() {
    let dir = temp_dir("mtls");
    let ca = Ca::new("server CA");
    let clients = Ca::new("client CA");
    std::fs::write(dir.join("clients.pem"), &clients.pem).unwrap();
    let config = tls_files(
        &dir,
        &ca,
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: clients.pem\n",
    );
    let server = start(&config);
    let good = clients.leaf("scraper", true);
    let reply = https_get(server.addr, &ca.pem, Some(&good), "/metrics").unwrap();
    assert_eq!(reply.status, 200);

    assert!(https_get(server.addr, &ca.pem, None, "/metrics").is_err());
    let stranger = Ca::new("stranger CA").leaf("scraper", true);
    assert!(https_get(server.addr, &ca.pem, Some(&stranger), "/metrics").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn verify_client_cert_if_given_allows_none_but_checks_one() {
    let dir = temp_dir("mtls-optional");
    let ca = Ca::new("server CA");
    let clients = Ca::new("client CA");
    std::fs::write(dir.join("clients.pem"), &clients.pem).unwrap();
    let config = tls_files(
        &dir,
        &ca,
        "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: clients.pem\n",
    );
    let server = start(&config);
    assert_eq!(
        https_get(server.addr, &ca.pem, None, "/metrics")
            .unwrap()
            .status,
        200
    );
    let good = clients.leaf("scraper", true);
    assert_eq!(
        https_get(server.addr, &ca.pem, Some(&good), "/metrics")
            .unwrap()
            .status,
        200
    );
    let stranger = Ca::new("stranger CA").leaf("scraper", true);
    assert!(https_get(server.addr, &ca.pem, Some(&stranger), "/metrics").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn require_any_client_cert_takes_any_but_needs_one() {
    let dir = temp_dir("mtls-any");
    let ca = Ca::new("server CA");
    let config = tls_files(&dir, &ca, "  client_auth_type: RequireAnyClientCert\n");
    let server = start(&config);
    let anyone = Ca::new("anyone's CA").leaf("scraper", true);
    assert_eq!(
        https_get(server.addr, &ca.pem, Some(&anyone), "/metrics")
            .unwrap()
            .status,
        200
    );
    assert!(https_get(server.addr, &ca.pem, None, "/metrics").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A ClientHello without supported_versions, so `legacy_version` (0x0302:
/// TLS 1.1) is the version offered; built by hand so that no client
/// library's policy decides what is sent.
fn legacy_client_hello(minor: u8) -> Vec<u8> {
    let mut body = vec![0x03, minor];
    body.extend_from_slice(&[0x42; 32]); // random
    body.push(0); // session id
                  // Suites the server supports, so that only the version can be refused:
                  // TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, ..._RSA_..., TLS 1.0 suites.
    body.extend_from_slice(&[0x00, 0x08, 0xc0, 0x2b, 0xc0, 0x2f, 0xc0, 0x13, 0x00, 0x2f]);
    body.extend_from_slice(&[0x01, 0x00]); // null compression
                                           // signature_algorithms, supported_groups and ec_point_formats, so that
                                           // nothing but the version stands in the way.
    let extensions: &[u8] = &[
        0x00, 0x0d, 0x00, 0x08, 0x00, 0x06, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, // sigalgs
        0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17, // groups
        0x00, 0x0b, 0x00, 0x02, 0x01, 0x00, // point formats
    ];
    body.extend_from_slice(&u16::try_from(extensions.len()).unwrap().to_be_bytes());
    body.extend_from_slice(extensions);
    let mut hs = vec![0x01, 0x00];
    hs.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    hs.extend_from_slice(&body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend_from_slice(&u16::try_from(hs.len()).unwrap().to_be_bytes());
    record.extend_from_slice(&hs);
    record
}

#[test]
fn tls_1_1_is_refused() {
    let dir = temp_dir("tls11");
    let ca = Ca::new("test CA");
    let server = start(&tls_files(&dir, &ca, ""));
    // The same hello as TLS 1.2 gets a ServerHello: only the version differs.
    let mut s = connect(server.addr);
    s.write_all(&legacy_client_hello(3)).unwrap();
    let mut head = [0u8; 6];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 0x16, "{head:?}");
    assert_eq!(head[5], 0x02, "{head:?}");

    let mut s = connect(server.addr);
    s.write_all(&legacy_client_hello(2)).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    // A fatal protocol_version alert (RFC 8446 section 6: level 2,
    // description 70), never a ServerHello.
    assert_eq!(buf.first(), Some(&0x15), "{buf:?}");
    assert_eq!(buf.get(5..7), Some(&[2u8, 70][..]), "{buf:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn basic_auth() {
    let dir = temp_dir("auth");
    let hash = bcrypt::hash("s3cr3t", 4).unwrap();
    let config = dir.join("web.yml");
    std::fs::write(
        &config,
        format!("basic_auth_users:\n  alice: {hash}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"),
    )
    .unwrap();
    let server = start(&config);
    let basic = |user_pass: &str| {
        use base64::Engine as _;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        )
    };
    // Twice: the second answer comes from the verified-credentials cache.
    for _ in 0..2 {
        let ok = http_get(server.addr, "/metrics", Some(&basic("alice:s3cr3t")));
        assert_eq!(ok.status, 200);
        assert_eq!(ok.header("x-frame-options").as_deref(), Some("deny"));
    }
    for auth in [
        Some(basic("alice:wrong")),
        Some(basic("mallory:s3cr3t")),
        Some("Bearer abc".to_string()),
        None,
    ] {
        let r = http_get(server.addr, "/metrics", auth.as_deref());
        assert_eq!(r.status, 401, "{auth:?}");
        assert_eq!(
            r.header("www-authenticate").as_deref(),
            Some("Basic realm=\"roce_exporter\""),
            "{auth:?}"
        );
        assert_eq!(r.header("x-frame-options").as_deref(), Some("deny"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rotated_certificate_is_served_without_restart() {
    let dir = temp_dir("rotate");
    let old = Ca::new("old CA");
    let server = start(&tls_files(&dir, &old, ""));
    assert_eq!(
        https_get(server.addr, &old.pem, None, "/metrics")
            .unwrap()
            .status,
        200
    );
    let new = Ca::new("new CA");
    let (cert, key) = new.leaf("localhost", false);
    write_atomic(&dir.join("server.key"), &key);
    write_atomic(&dir.join("server.crt"), &cert);
    let reply = eventually("the new certificate is served", || {
        https_get(server.addr, &new.pem, None, "/metrics").ok()
    });
    assert_eq!(reply.status, 200);
    let err = https_get(server.addr, &old.pem, None, "/metrics").unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn invalid_change_at_run_time_keeps_the_old_config() {
    let dir = temp_dir("bad-reload");
    let config = dir.join("web.yml");
    std::fs::write(&config, "http_server_config:\n  headers:\n    X-Gen: one\n").unwrap();
    let server = start(&config);
    assert_eq!(
        http_get(server.addr, "/metrics", None)
            .header("x-gen")
            .as_deref(),
        Some("one")
    );
    write_atomic(&config, "basic_auth_users:\n  alice: not-a-hash\n");
    // Past the once-a-second look, the refused file changes nothing.
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..3 {
        let r = http_get(server.addr, "/metrics", None);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-gen").as_deref(), Some("one"));
    }
    // A later valid edit is still picked up.
    write_atomic(&config, "http_server_config:\n  headers:\n    X-Gen: two\n");
    eventually("the fixed file is loaded", || {
        let r = http_get(server.addr, "/metrics", None);
        (r.header("x-gen").as_deref() == Some("two")).then_some(())
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn invalid_web_config_at_start_exits_2() {
    let dir = temp_dir("bad-start");
    let config = dir.join("web.yml");
    std::fs::write(
        &config,
        "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_roce_exporter"))
        .arg("--web.listen-address=127.0.0.1:0")
        .arg("--web.config.file")
        .arg(&config)
        .arg("--path.sysfs")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("roce_exporter: invalid web configuration: "),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "tls_server_config.cert_file {}",
            dir.join("missing.crt").display()
        )),
        "{stderr}"
    );

    std::fs::write(&config, "tls_server_confg: {}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_roce_exporter"))
        .arg("--web.listen-address=127.0.0.1:0")
        .arg("--web.config.file")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tls_server_confg"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
