//! `--web.config.file` against real sockets on 127.0.0.1: TLS served with
//! the configured certificate, wrong CA refused, mutual TLS, TLS 1.1
//! refused, basic auth (bcrypt run once per distinct credentials),
//! certificate rotation without restart, an invalid file at start (exit
//! status 2) and at run time (old one kept), reloads that would lower the
//! protection refused, and a certificate named before it exists picked up
//! when it appears.
//! Certificates are made at test time with rcgen in a fresh directory; no
//! private key is committed. Clients are blocking rustls clients on the test
//! thread; the server runs on its own tokio runtime.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::support::connect;
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
pub(crate) fn temp_dir(name: &str) -> PathBuf {
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

pub(crate) struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub(crate) pem: String,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
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
pub(crate) fn tls_files(dir: &Path, ca: &Ca, extra: &str) -> PathBuf {
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
    /// The server's watcher: tests look at the files through it at once
    /// instead of waiting for a new connection a second later.
    watcher: Arc<WebConfigWatcher>,
}

fn start(web_config: &Path) -> Server {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let watcher = Arc::new(WebConfigWatcher::load(web_config).expect("valid web config"));
    let listeners = runtime
        .block_on(server::bind(&["127.0.0.1:0".to_string()]))
        .unwrap();
    let addr = listeners[0].local_addr().unwrap();
    let app = Arc::new(App::new(
        BuildInfo::current(Duration::from_secs(5)),
        Arc::new(Snapshot::default()),
    ));
    let mut options = ServeOptions::new(WebLimits::default());
    options.web_config = Some(watcher.clone());
    runtime.spawn(server::serve_with(
        listeners,
        app,
        options,
        std::future::pending(),
    ));
    Server {
        runtime,
        addr,
        watcher,
    }
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

/// Plain HTTP GET.
fn http_get(addr: SocketAddr, path: &str, auth: Option<&str>) -> Reply {
    let mut s = connect(addr, EVENTUALLY).unwrap();
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
    https_request(addr, ca_pem, client, path, None)
}

/// [`https_get`] with an `Authorization` header if given.
fn https_request(
    addr: SocketAddr,
    ca_pem: &str,
    client: Option<&(String, String)>,
    path: &str,
    auth: Option<&str>,
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
    let mut tls = rustls::StreamOwned::new(conn, connect(addr, EVENTUALLY).unwrap());
    tls.write_all(&request_bytes(path, auth))
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
    let mut s = connect(server.addr, EVENTUALLY).unwrap();
    s.write_all(&request_bytes("/metrics", None)).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(!buf.starts_with(b"HTTP/"), "{buf:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TLS server asking for client certificates as `client_auth_type` says,
/// verified against a client CA of their own (`client_ca_file:
/// clients.pem`): the folder, the server's CA, the clients' CA, the server.
fn start_with_client_ca(name: &str, client_auth_type: &str) -> (PathBuf, Ca, Ca, Server) {
    let dir = temp_dir(name);
    let ca = Ca::new("server CA");
    let clients = Ca::new("client CA");
    std::fs::write(dir.join("clients.pem"), &clients.pem).unwrap();
    let config = tls_files(
        &dir,
        &ca,
        &format!("  client_auth_type: {client_auth_type}\n  client_ca_file: clients.pem\n"),
    );
    let server = start(&config);
    (dir, ca, clients, server)
}

/// The status of `GET /metrics` over TLS trusting `ca`, with `client`'s
/// certificate if given; `Err` with rustls's words when refused.
fn metrics_status(
    server: &Server,
    ca: &Ca,
    client: Option<&(String, String)>,
) -> Result<u16, String> {
    https_get(server.addr, &ca.pem, client, "/metrics").map(|r| r.status)
}

#[test]
fn mutual_tls_required_and_verified() {
    let (dir, ca, clients, server) = start_with_client_ca("mtls", "RequireAndVerifyClientCert");
    let good = clients.leaf("scraper", true);
    assert_eq!(metrics_status(&server, &ca, Some(&good)), Ok(200));

    assert!(metrics_status(&server, &ca, None).is_err());
    let stranger = Ca::new("stranger CA").leaf("scraper", true);
    assert!(metrics_status(&server, &ca, Some(&stranger)).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn verify_client_cert_if_given_allows_none_but_checks_one() {
    let (dir, ca, clients, server) =
        start_with_client_ca("mtls-optional", "VerifyClientCertIfGiven");
    assert_eq!(metrics_status(&server, &ca, None), Ok(200));
    let good = clients.leaf("scraper", true);
    assert_eq!(metrics_status(&server, &ca, Some(&good)), Ok(200));
    let stranger = Ca::new("stranger CA").leaf("scraper", true);
    assert!(metrics_status(&server, &ca, Some(&stranger)).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn require_any_client_cert_takes_any_but_needs_one() {
    let dir = temp_dir("mtls-any");
    let ca = Ca::new("server CA");
    let config = tls_files(&dir, &ca, "  client_auth_type: RequireAnyClientCert\n");
    let server = start(&config);
    let anyone = Ca::new("anyone's CA").leaf("scraper", true);
    assert_eq!(metrics_status(&server, &ca, Some(&anyone)), Ok(200));
    assert!(metrics_status(&server, &ca, None).is_err());
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
    let mut s = connect(server.addr, EVENTUALLY).unwrap();
    s.write_all(&legacy_client_hello(3)).unwrap();
    let mut head = [0u8; 6];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 0x16, "{head:?}");
    assert_eq!(head[5], 0x02, "{head:?}");

    let mut s = connect(server.addr, EVENTUALLY).unwrap();
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
    // The peer-probe endpoints are behind the same credentials.
    let r = http_get(server.addr, "/peer-probe/endpoints", None);
    assert_eq!(r.status, 401);
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

fn basic(user_pass: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

/// TLS with a required, verified client certificate and basic auth: the
/// most protection a file can give. Returns the config path, the server
/// CA, a client certificate and the user's password.
fn protected_files(dir: &Path, ca: &Ca) -> (PathBuf, (String, String), &'static str) {
    let password = "s3cr3t";
    let hash = bcrypt::hash(password, 4).unwrap();
    std::fs::write(dir.join("ca.crt"), &ca.pem).unwrap();
    let config = tls_files(
        dir,
        ca,
        &format!("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\nbasic_auth_users:\n  alice: {hash}\n"),
    );
    (config, ca.leaf("scraper", true), password)
}

/// HTTPS GET with a client certificate and credentials.
fn https_get_auth(
    addr: SocketAddr,
    ca: &Ca,
    client: &(String, String),
    auth: Option<&str>,
) -> Result<Reply, String> {
    https_request(addr, &ca.pem, Some(client), "/metrics", auth)
}

/// What a client sees: plain HTTP refused, HTTPS without a client
/// certificate refused, with one but without the password 401, with both
/// 200. Panics otherwise.
fn assert_fully_protected(server: &Server, ca: &Ca, client: &(String, String), password: &str) {
    let config = server.watcher.current();
    assert!(config.tls().is_some(), "TLS is still on");
    assert!(config.requires_auth(), "basic auth is still on");
    // A plain request to a TLS port gets no HTTP answer.
    let mut s = connect(server.addr, EVENTUALLY).unwrap();
    s.write_all(&request_bytes("/metrics", None)).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(
        !buf.starts_with(b"HTTP/1.1 200"),
        "plain HTTP answered: {}",
        String::from_utf8_lossy(&buf)
    );
    assert!(
        https_get(server.addr, &ca.pem, None, "/metrics").is_err(),
        "served without a client certificate"
    );
    assert_eq!(
        https_get_auth(server.addr, ca, client, None)
            .unwrap()
            .status,
        401
    );
    let auth = basic(&format!("alice:{password}"));
    assert_eq!(
        https_get_auth(server.addr, ca, client, Some(&auth))
            .unwrap()
            .status,
        200
    );
}

/// `: > web.yml` (what a configuration tool does before writing the new
/// file) used to switch the server to plain HTTP without auth.
#[test]
fn an_emptied_or_unparsable_web_config_is_refused() {
    let dir = temp_dir("emptied");
    let ca = Ca::new("test CA");
    let (config, client, password) = protected_files(&dir, &ca);
    let server = start(&config);
    assert_fully_protected(&server, &ca, &client, password);
    for text in [
        "",
        "# being rewritten\n",
        "tls_server_config:\n  cert_file: [\n",
    ] {
        std::fs::write(&config, text).unwrap();
        server.watcher.recheck(true);
        assert_fully_protected(&server, &ca, &client, password);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Valid files that would lower the protection in force are refused; a
/// restart is needed for that.
#[test]
fn a_reload_that_lowers_protection_is_refused() {
    let dir = temp_dir("lower");
    let ca = Ca::new("test CA");
    let (config, client, password) = protected_files(&dir, &ca);
    let original = std::fs::read_to_string(&config).unwrap();
    let server = start(&config);
    let hash = bcrypt::hash(password, 4).unwrap();
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let verified = "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n";
    let users = format!("basic_auth_users:\n  alice: {hash}\n");
    for lowered in [
        // tls_server_config removed.
        users.clone(),
        // The client certificate no longer required, or no longer verified.
        format!("{tls}{users}"),
        format!(
            "{tls}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n{users}"
        ),
        format!("{tls}  client_auth_type: RequireAnyClientCert\n{users}"),
        // The users removed.
        format!("{tls}{verified}"),
    ] {
        std::fs::write(&config, &lowered).unwrap();
        server.watcher.recheck(true);
        assert_fully_protected(&server, &ca, &client, password);
    }
    // A change that keeps the protection is applied.
    std::fs::write(
        &config,
        format!("{original}http_server_config:\n  headers:\n    X-Gen: two\n"),
    )
    .unwrap();
    server.watcher.recheck(true);
    let auth = basic(&format!("alice:{password}"));
    let r = https_get_auth(server.addr, &ca, &client, Some(&auth)).unwrap();
    assert_eq!(r.header("x-gen").as_deref(), Some("two"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A refused file's certificate and key are watched too: before, a
/// `cert_file` that did not exist yet was never looked at again, and the
/// certificate created later was not picked up until web.yml changed.
#[test]
fn a_certificate_named_before_it_exists_is_picked_up_when_it_appears() {
    let dir = temp_dir("later");
    let old = Ca::new("old CA");
    let config = tls_files(&dir, &old, "");
    let server = start(&config);
    write_atomic(
        &config,
        "tls_server_config:\n  cert_file: next.crt\n  key_file: next.key\n",
    );
    server.watcher.recheck(true);
    assert_eq!(
        https_get(server.addr, &old.pem, None, "/metrics")
            .unwrap()
            .status,
        200,
        "refused: the old certificate is still served"
    );
    let new = Ca::new("new CA");
    let (cert, key) = new.leaf("localhost", false);
    std::fs::write(dir.join("next.key"), key).unwrap();
    std::fs::write(dir.join("next.crt"), cert).unwrap();
    // web.yml itself has not changed since it was refused.
    server.watcher.recheck(true);
    assert_eq!(
        https_get(server.addr, &new.pem, None, "/metrics")
            .unwrap()
            .status,
        200,
        "the new certificate is served"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Keep-alive requests on one plain connection: the status of each.
fn keep_alive_statuses(addr: SocketAddr, auths: &[String]) -> Vec<u16> {
    let mut s = connect(addr, EVENTUALLY).unwrap();
    let mut statuses = Vec::new();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    for auth in auths {
        s.write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: t\r\nAuthorization: {auth}\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let (end, length) = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let reply = parse_reply(&buf[..end + 4]).unwrap();
                let length: usize = reply.header("content-length").unwrap().parse().unwrap();
                statuses.push(reply.status);
                break (end + 4, length);
            }
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "closed before answering");
            buf.extend_from_slice(&chunk[..n]);
        };
        while buf.len() < end + length {
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "short body");
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.drain(..end + length);
    }
    statuses
}

/// 60 keep-alive connections sending wrong passwords used to run bcrypt
/// for every request, on as many threads: each distinct credential is
/// now verified once (failures are cached too), and the right password
/// is answered meanwhile.
#[test]
fn bcrypt_runs_once_per_distinct_credentials_under_a_wrong_password_flood() {
    let dir = temp_dir("bcrypt");
    let hash = bcrypt::hash("s3cr3t", 4).unwrap();
    let config = dir.join("web.yml");
    std::fs::write(&config, format!("basic_auth_users:\n  alice: {hash}\n")).unwrap();
    let server = start(&config);
    let addr = server.addr;
    let right = basic("alice:s3cr3t");
    assert_eq!(
        keep_alive_statuses(addr, std::slice::from_ref(&right)),
        [200]
    );
    let attackers: Vec<_> = (0..60)
        .map(|i| {
            std::thread::spawn(move || {
                // Each its own wrong password, and one they all share.
                let own = basic(&format!("alice:wrong-{i}"));
                let shared = basic("alice:wrong");
                let auths: Vec<String> = (0..10)
                    .map(|j| {
                        if j % 2 == 0 {
                            own.clone()
                        } else {
                            shared.clone()
                        }
                    })
                    .collect();
                keep_alive_statuses(addr, &auths)
            })
        })
        .collect();
    // The right password during the attack, on new and kept-alive
    // connections.
    for _ in 0..5 {
        assert_eq!(
            keep_alive_statuses(addr, &[right.clone(), right.clone()]),
            [200, 200]
        );
    }
    for a in attackers {
        let statuses = a.join().unwrap();
        // 401, or 503 when the bcrypt queue was full: never let through.
        assert!(
            statuses.iter().all(|s| *s == 401 || *s == 503),
            "{statuses:?}"
        );
    }
    // alice:s3cr3t once, 60 own wrong passwords and the shared one at
    // most once each (600 requests with a wrong password).
    let runs = server.watcher.current().bcrypt_verifications();
    assert!(runs <= 62, "{runs} bcrypt verifications");
    let _ = std::fs::remove_dir_all(&dir);
}
