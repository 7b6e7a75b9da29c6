#!/usr/bin/env bash
# CI's short load test of the HTTP server (bench/load.py): the exporter on
# the demo tree, 200 keep-alive scrapers for 5 s quiet, then 5 s beside
# each attack of 1,000 abusive clients (25x web.max_requests): stalled
# headers, reconnecting slow headers, slow readers, non-readers, oversized
# requests, then all of them mixed; all on 127.0.0.1. Fails when a scraper
# saw an error or a p99 over 1 s, an abusive connection was held past its
# bound or the exporter's RSS grew past the limits. The full run (30 s per
# phase, release binary, bench/load-results.md) is `python3 bench/load.py`.
#
# The binary is the debug build `cargo test` has just made (as the VM steps
# use it): what is checked here is behaviour under load (no error, every
# abuser cut, memory bounded), which a release build would only make
# faster, at the price of a second full build of the workspace in CI.
# ROCE_EXPORTER_BIN picks another binary.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${ROCE_EXPORTER_BIN:-}
if [[ -z $bin ]]; then
  cargo build --quiet --bin roce_exporter
  bin=${CARGO_TARGET_DIR:-target}/debug/roce_exporter
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$SECONDS
# The slow readers' bound is the connection age (65 s), longer than this
# run: those still open at the end are reported, not waited for.
timeout 150 python3 bench/load.py --no-build --duration 5 --slice 5 --abusers 1000 \
  --no-wait-cuts --binary "$bin" --out "$out/load-results.md"
echo "load test: $((SECONDS - start)) s"
