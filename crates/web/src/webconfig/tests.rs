use super::*;

fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
    WebConfig::parse(text, "web.yml", Path::new("/nonexistent-dir"))
}

fn message(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("{text:?} should be refused"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_file_is_plain_http() {
    let c = parse("# nothing\n").unwrap();
    assert!(c.tls().is_none());
    assert!(!c.requires_auth());
    assert!(c.authorize(&HeaderMap::new()));
}

#[test]
fn unknown_keys_are_errors_with_position() {
    let m = message("basic_auth_users: {}\nhttp_server_config:\n  headerz: {}\n");
    assert!(m.starts_with("web.yml: "), "{m}");
    assert!(m.contains("headerz"), "{m}");
    assert!(m.contains("line 3"), "{m}");
    assert!(m.contains("column 3"), "{m}");
}

#[test]
fn tls_refusals_name_the_key() {
    let tls = "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n";
    assert_eq!(
            message(&format!("{tls}  min_version: TLS11\n")),
            "web.yml: tls_server_config.min_version: TLS 1.0 and 1.1 are not supported; use TLS12 or TLS13"
        );
    assert_eq!(
        message(&format!(
            "{tls}  min_version: TLS13\n  max_version: TLS12\n"
        )),
        "web.yml: tls_server_config: min_version is above max_version"
    );
    let m = message(tls);
    assert!(
        m.starts_with("web.yml: tls_server_config.cert_file /nonexistent-dir/a.crt: "),
        "{m}"
    );
}

#[test]
fn bad_client_auth_type_is_refused() {
    let m = message(
            "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  client_auth_type: RequireClientCert\n",
        );
    assert!(m.contains("RequireClientCert"), "{m}");
    assert!(m.contains("line 4"), "{m}");
}

#[test]
fn missing_files_are_named() {
    let m = message("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n");
    assert!(
        m.contains("tls_server_config.cert_file /nonexistent-dir/a.crt"),
        "{m}"
    );
}

#[test]
fn old_tls_versions_are_refused() {
    let m = message(
        "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  min_version: TLS11\n",
    );
    assert!(m.contains("TLS 1.0 and 1.1 are not supported"), "{m}");
}

#[test]
fn bad_hashes_and_headers_are_refused() {
    let m = message("basic_auth_users:\n  alice: plaintext\n");
    assert!(m.contains("not a bcrypt hash"), "{m}");
    let m = message("http_server_config:\n  headers:\n    Content-Type: x\n");
    assert!(m.contains("set by the server"), "{m}");
    let ok = parse("http_server_config:\n  headers:\n    X-Frame-Options: deny\n  http2: true\n")
        .unwrap();
    assert_eq!(ok.headers().len(), 1);
}

/// Found while writing fuzz/fuzz_targets/web_config.rs and confirmed
/// with it (a libFuzzer timeout): a hash of cost 31 was accepted, and
/// the first request with a wrong password then ran bcrypt with 2^31
/// rounds, a scrape blocked for about a day and a half.
#[test]
fn bcrypt_cost_31_hash_is_refused() {
    let salt_and_hash = "N9Rv4oZ8QhVJ0xq3s0dKxeqE6A6bCUVo2yD6gG0rX8eO6gO1Hc1bC";
    let m = message(&format!(
        "basic_auth_users:\n  u: '$2y$31${salt_and_hash}'\n"
    ));
    assert!(m.contains("bcrypt cost"), "{m}");
    let ok = parse(&format!(
        "basic_auth_users:\n  u: '$2y$04${salt_and_hash}'\n"
    ))
    .unwrap();
    assert!(ok.requires_auth());
}

#[test]
fn credentials_are_parsed_and_compared() {
    let mut h = HeaderMap::new();
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("Basic YWxpY2U6czNjcjN0OmV4dHJh"),
    );
    assert_eq!(
        basic_credentials(&h),
        Some(("alice".into(), "s3cr3t:extra".into()))
    );
    h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
    assert_eq!(basic_credentials(&h), None);
}
