# The load test's host side in the two- and three-VM runs (sourced by
# e2e-peer.sh and e2e-fleet.sh; bash). The guests' steps are
# guest/load.sh, the checks check_load.py.
#
# load_prepare SHARE: the credentials the load test needs, in SHARE/ctl/load
# (the folder every VM mounts): a CA, one server certificate for every VM
# address (10.0.2.15-17, 10.0.3.15-17), the responders' web config (TLS and
# basic auth) and the requesters' password file. The password is a test
# fixture; its bcrypt hash is below, made once with Python's
# crypt(METHOD_BLOWFISH): no bcrypt tool is needed at run time. Cost 4,
# bcrypt's least: at cost 10 one check takes an emulated guest 5-10 s.
LOAD_USER=load
LOAD_PASSWORD=roce-load-test
LOAD_HASH='$2b$04$.j3CM.abnYXf3BH6rEivJO55PD75GKSM8jiTiIzd0lN9JBdl7/1fi'

load_prepare() {
  local d=$1/ctl/load
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=roce-load-test-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null || { log "openssl: no CA"; return 1; }
  openssl req -newkey rsa:2048 -nodes -subj "/CN=roce-load-responder" \
    -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:10.0.2.15,IP:10.0.2.16,IP:10.0.2.17,IP:10.0.3.15,IP:10.0.3.16,IP:10.0.3.17\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$d/ext.cnf"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/ext.cnf" -out "$d/server.crt" 2>/dev/null || { log "openssl: no server certificate"; return 1; }
  cat > "$d/web.yml" <<EOF
tls_server_config:
  cert_file: server.crt
  key_file: server.key
basic_auth_users:
  $LOAD_USER: '$LOAD_HASH'
EOF
  printf '%s\n' "$LOAD_PASSWORD" > "$d/password"
  chmod 644 "$d"/*
}

# load_add: the run.sh option that puts the guest steps into a VM
load_add() {
  printf '%s\n' "-a" "$HERE/guest/load.sh:/guest/load.sh"
}
