#!/usr/bin/env bash
# CI's short load test of the HTTP server (bench/load.py): the release
# binary on the demo tree, 200 keep-alive scrapers for 20 s quiet and 20 s
# beside slow-header, slow-reading, non-reading and oversized clients, all on
# 127.0.0.1. Fails when a scraper saw an error, an abusive connection was
# held past its bound or the exporter's RSS grew past the limits. The full
# run (60 s per phase, bench/load-results.md) is `python3 bench/load.py`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin roce_exporter
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$SECONDS
# The slow readers' bound is the connection age (65 s), longer than this
# run: they are reported, not waited for (--no-wait-cuts).
timeout 150 python3 bench/load.py --no-build --duration 20 --no-wait-cuts \
  --binary "${CARGO_TARGET_DIR:-target}/release/roce_exporter" --out "$out/load-results.md"
echo "load test: $((SECONDS - start)) s"
