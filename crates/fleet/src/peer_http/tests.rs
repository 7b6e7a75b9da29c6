use super::*;
use std::io::{Read, Write};

/// The body of `raw` as the client takes it (hyper over the answer
/// held in memory).
fn decode(raw: &[u8], _authority: &str, request: &Request) -> Result<Vec<u8>, FetchError> {
    parse_answer(raw, request).1
}

/// Whether `raw` is whole without the end of the connection.
fn complete(raw: &[u8]) -> bool {
    parse_answer(raw, &req(1024)).0
}

fn req(max: usize) -> Request<'static> {
    Request {
        path: "/peer-probe/endpoints",
        accept: "application/json",
        max_body: max,
        gzip: true,
    }
}

#[test]
fn only_http_1x_200_is_an_answer_and_redirects_are_refused() {
    let d = |raw: &[u8]| decode(raw, "b:1", &req(1024)).map_err(|e| e.reason);
    assert_eq!(d(b"HTTP/1.1 200 OK\r\n\r\n{}"), Ok(b"{}".to_vec()));
    assert_eq!(d(b"HTTP/1.0 200 OK\r\n\r\n{}"), Ok(b"{}".to_vec()));
    assert_eq!(
        d(b"HTTP/1.1 302 Found\r\nLocation: http://evil/\r\n\r\n"),
        Err(FetchReason::Redirect)
    );
    assert_eq!(d(b"HTTP/1.1 301 Moved\r\n\r\n"), Err(FetchReason::Redirect));
    assert_eq!(
        d(b"HTTP/1.1 404 Not Found\r\n\r\n"),
        Err(FetchReason::Status)
    );
    // Not HTTP/1.x, or a status that is not three digits.
    for bad in [
        &b"HTTP/2 200\r\n\r\n{}"[..],
        b"ICY 200 OK\r\n\r\n{}",
        b"HTTP/1.1 2000 OK\r\n\r\n{}",
        b"HTTP/1.1 200OK\r\n\r\n{}",
        b"garbage",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    ] {
        assert_eq!(
            d(bad),
            Err(FetchReason::Parse),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    // Bounds: a body over the bound, before and after decoding.
    let big = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n{}",
        "x".repeat(2000)
    );
    assert_eq!(d(big.as_bytes()), Err(FetchReason::TooLarge));
    let head = format!(
        "HTTP/1.1 200 OK\r\nX: {}\r\n\r\n",
        "y".repeat(MAX_HEAD_BYTES)
    );
    assert_eq!(d(head.as_bytes()), Err(FetchReason::TooLarge));
}

#[test]
fn chunked_and_gzip_bodies_are_decoded_within_their_bounds() {
    let d = |raw: &[u8], max| decode(raw, "b:1", &req(max)).map_err(|e| e.reason);
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n";
    assert!(complete(chunked));
    assert_eq!(d(chunked, 1024), Ok(b"{\"a\":1}".to_vec()));
    assert_eq!(d(chunked, 5), Err(FetchReason::TooLarge));
    let cut = &chunked[..chunked.len() - 7];
    assert!(!complete(cut));
    assert_eq!(d(cut, 1024), Err(FetchReason::Parse));
    // A chunk announcing 2^64-1 bytes: hyper hands its data on as it
    // comes (no size is refused at the size line): over the bound it
    // is refused as too large, cut short as a truncated body.
    let huge = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx";
    assert_eq!(d(huge, 1024), Err(FetchReason::Parse));
    let mut huger = huge.to_vec();
    huger.extend_from_slice(&[b'x'; 2000]);
    assert_eq!(d(&huger, 1024), Err(FetchReason::TooLarge));
    let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    assert_eq!(d(bad, 1024), Err(FetchReason::Parse));

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&vec![b'a'; 100_000]).unwrap();
    let gz = gz.finish().unwrap();
    let mut raw = format!(
        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        gz.len()
    )
    .into_bytes();
    raw.extend_from_slice(&gz);
    assert_eq!(d(&raw, 200_000).map(|b| b.len()), Ok(100_000));
    // A small compressed body that inflates past the bound.
    assert_eq!(d(&raw, 50_000), Err(FetchReason::TooLarge));
    let unasked = decode(
        &raw,
        "b:1",
        &Request {
            gzip: false,
            ..req(200_000)
        },
    );
    assert_eq!(unasked.map_err(|e| e.reason), Err(FetchReason::Parse));
}

#[test]
fn urls_parse_with_default_ports_and_no_user_info() {
    let u = Url::parse("http://prom:9090/prometheus/").unwrap();
    assert_eq!(
        (u.tls, u.authority.as_str(), u.prefix.as_str()),
        (false, "prom:9090", "/prometheus")
    );
    let u = Url::parse("https://[fd00::1]").unwrap();
    assert_eq!(
        (u.authority.as_str(), u.host()),
        ("[fd00::1]:443", "fd00::1")
    );
    assert_eq!(Url::parse("http://prom").unwrap().authority, "prom:80");
    for bad in [
        "ftp://x",
        "http://",
        "http://u:p@x:1",
        "http://x/?q",
        "x:1",
        "http://a b",
    ] {
        assert_eq!(Url::parse(bad), None, "{bad}");
    }
    assert_eq!(query_escape("a{b=\"c\"} x"), "a%7Bb%3D%22c%22%7D%20x");
}

#[test]
fn credentials_never_leave_over_plain_http() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let client = HttpClient::new(
        Duration::from_secs(2),
        None,
        Some(basic_authorization("u", "p")),
    );
    let e = client.get(&url, &req(1024)).unwrap_err();
    assert_eq!(e.reason, FetchReason::PlainHttpCredentials);
    // Nothing connected.
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err());
}

/// A peer that sends its answer one byte a second (a slow loris)
/// costs the fetch deadline, not a read timeout per byte: the answer
/// would take minutes; the fetch ends at its deadline with `timeout`,
/// having taken a few bytes.
#[test]
fn a_peer_sending_one_byte_a_second_costs_at_most_the_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        let body = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n{}",
            "x".repeat(300)
        );
        for b in body.bytes() {
            if s.write_all(&[b]).is_err() {
                return;
            }
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let client = HttpClient::new(Duration::from_secs(2), None, None);
    let e = client.get(&url, &req(1024)).unwrap_err();
    assert_eq!(e.reason, FetchReason::Timeout, "{e}");
    let taken = sent.load(std::sync::atomic::Ordering::SeqCst);
    // Two seconds of a byte a second (and the one in flight), of the
    // answer's 340 bytes.
    assert!(taken <= 4, "{taken} bytes taken before the deadline");
    drop(client);
    // The server notices the closed connection at its next byte.
    server.join().unwrap();
}

/// The same in the body: a whole head at once, then a byte a second
/// of a 300-byte body. The deadline ends it.
#[test]
fn a_peer_trickling_its_body_costs_at_most_the_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n");
        for _ in 0..300 {
            if s.write_all(b"x").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let client = HttpClient::new(Duration::from_secs(2), None, None);
    let e = client.get(&url, &req(1024)).unwrap_err();
    assert_eq!(e.reason, FetchReason::Timeout, "{e}");
    server.join().unwrap();
}

/// A name that never resolves costs the deadline too (the lookup runs
/// on its own thread, given up on at the deadline).
#[test]
fn an_unresolvable_name_is_a_resolve_error_within_the_deadline() {
    let client = HttpClient::new(Duration::from_secs(5), None, None);
    let url = Url::parse("http://no-such-peer.invalid:9879").unwrap();
    let e = client.get(&url, &req(1024)).unwrap_err();
    assert!(
        matches!(e.reason, FetchReason::Resolve | FetchReason::Timeout),
        "{e}"
    );
}

/// A secret file that is a FIFO (a read would block forever) or
/// /dev/zero (endless) is refused at start, never read.
#[test]
fn secrets_are_small_regular_files_never_a_fifo_or_a_device() {
    let dir = std::env::temp_dir().join(format!("peer-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let e = read_secret("peer_probes.password_file", &fifo).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let e = read_secret("peer_probes.password_file", Path::new("/dev/zero")).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let big = dir.join("big");
    std::fs::write(&big, vec![b'a'; 5000]).unwrap();
    assert!(read_secret("k", &big).is_err());
    let ok = dir.join("ok");
    std::fs::write(&ok, "s3cret\r\nsecond line\n").unwrap();
    assert_eq!(read_secret("k", &ok).unwrap(), "s3cret");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server on 127.0.0.1 that reads the request, writes `answer` (as
/// far as the client takes it) and holds the connection open until
/// the client closes it: an answer ends by its own framing or not at
/// all.
fn serve_and_hold(answer: Vec<u8>) -> (Url, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        if s.write_all(&answer).is_ok() {
            // Returns when the client closes.
            let _ = s.read(&mut buf);
        }
    });
    (url, h)
}

fn client() -> HttpClient {
    HttpClient::new(Duration::from_secs(20), None, None)
}

/// A whole answer ends the fetch by its length or its last chunk: a
/// peer that keeps the connection open costs nothing more (the
/// deadline is far; a wait for the end would be a timeout).
#[test]
fn an_answer_whole_by_its_framing_ends_without_the_end_of_the_connection() {
    for answer in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    ] {
        let (url, h) = serve_and_hold(answer.to_vec());
        assert_eq!(client().get(&url, &req(1024)), Ok(b"{}".to_vec()));
        h.join().unwrap();
    }
}

/// 10 MB of headers: refused at the head's bound, as too large, not
/// read on (the connection is closed at the bound).
#[test]
fn ten_megabytes_of_headers_are_refused_at_the_head_bound() {
    let mut answer = b"HTTP/1.1 200 OK\r\n".to_vec();
    let line = format!("X-Pad: {}\r\n", "a".repeat(1000));
    while answer.len() < 10_000_000 {
        answer.extend_from_slice(line.as_bytes());
    }
    answer.extend_from_slice(b"Content-Length: 2\r\n\r\n{}");
    let (url, h) = serve_and_hold(answer);
    let e = client().get(&url, &req(1024)).unwrap_err();
    assert_eq!(e.reason, FetchReason::TooLarge, "{e}");
    assert!(e.message.contains("16384"), "{e}");
    h.join().unwrap();
    // More header fields than MAX_HEADERS, each small: refused too.
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n{}");
    assert!(many.len() < MAX_HEAD_BYTES);
    assert_eq!(
        parse_answer(&many, &req(1024)).1.map_err(|e| e.reason),
        Err(FetchReason::Parse)
    );
    // A trailer section past the head's bound after the last chunk.
    let mut trailers =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n".to_vec();
    while trailers.len() < 4 * MAX_HEAD_BYTES {
        trailers.extend_from_slice(b"X-Trailer: 1\r\n");
    }
    trailers.extend_from_slice(b"\r\n");
    assert_eq!(
        parse_answer(&trailers, &req(1024)).1.map_err(|e| e.reason),
        Err(FetchReason::Parse)
    );
}

/// A gzip bomb (8 MiB of zeros in about 8 KiB) over a socket: inflated
/// up to the bound and one byte more, then refused as too large.
#[test]
fn a_gzip_bomb_is_inflated_only_to_the_bound() {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..8 {
        gz.write_all(&zeros).unwrap();
    }
    let gz = gz.finish().unwrap();
    assert!(gz.len() < 64 * 1024, "{}", gz.len());
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        gz.len()
    )
    .into_bytes();
    answer.extend_from_slice(&gz);
    let (url, h) = serve_and_hold(answer);
    let e = client().get(&url, &req(64 * 1024)).unwrap_err();
    assert_eq!(e.reason, FetchReason::TooLarge, "{e}");
    h.join().unwrap();
}

/// A TLS server on 127.0.0.1 with a certificate for `name`, made here
/// and trusted by the client configuration returned; `answer` is
/// written once the request is read, then the connection is closed
/// without close_notify unless `notify`.
fn tls_server(
    name: &str,
    answer: &'static [u8],
    notify: bool,
) -> (Url, Arc<rustls::ClientConfig>, std::thread::JoinHandle<()>) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let dir = std::env::temp_dir().join(format!("peer-tls-{name}-{notify}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.pem"), cert.pem()).unwrap();
    let tls = client_config("tls_ca_file", &dir.join("ca.pem")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = Url::parse(&format!("https://{}", listener.local_addr().unwrap())).unwrap();
    let h = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(Arc::new(server)).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut buf = [0u8; 4096];
        if !matches!(tls.read(&mut buf), Ok(n) if n > 0) {
            return;
        }
        let _ = tls.write_all(answer);
        if notify {
            tls.conn.send_close_notify();
        }
        let _ = tls.flush();
    });
    (url, tls, h)
}

/// The certificate must name the host of the URL: a certificate the
/// configured CA holds, for another name, is refused as TLS.
#[test]
fn a_certificate_for_another_name_is_refused() {
    let (url, tls, h) = tls_server("peer-b.example", b"", true);
    let e = HttpClient::new(Duration::from_secs(20), Some(tls), None)
        .get(&url, &req(1024))
        .unwrap_err();
    assert_eq!(e.reason, FetchReason::Tls, "{e}");
    assert!(e.message.contains("not valid for name"), "{e}");
    h.join().unwrap();
}

/// Over TLS the end of the connection without close_notify may be a
/// cut made by someone else: an answer whole by its length is taken
/// (the end is never read), one that ends only with the connection is
/// refused as truncated unless close_notify says it is the end.
#[test]
fn over_tls_an_answer_ended_by_the_connection_needs_close_notify() {
    let get = |answer: &'static [u8], notify| {
        let (url, tls, h) = tls_server("127.0.0.1", answer, notify);
        let got = HttpClient::new(Duration::from_secs(20), Some(tls), None)
            .get(&url, &req(1024))
            .map_err(|e| e.reason);
        h.join().unwrap();
        got
    };
    let by_length = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    let by_end = b"HTTP/1.1 200 OK\r\n\r\n{}";
    assert_eq!(get(by_length, false), Ok(b"{}".to_vec()));
    assert_eq!(get(by_end, true), Ok(b"{}".to_vec()));
    assert_eq!(get(by_end, false), Err(FetchReason::Parse));
}
