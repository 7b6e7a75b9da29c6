#!/usr/bin/env bash
# CI's fuzzing step: installs cargo-fuzz if absent, builds every target of
# fuzz/ once, runs each for a bounded time (two at a time: libFuzzer is
# single-threaded and CI has two cores) from the committed seeds, and fails
# if any target crashed, hung or ran out of memory, printing the input that
# did it. Long local sessions: see fuzz/README.md.
#
#   bash .ci/fuzz.sh                 # every target, FUZZ_SECONDS each
#   FUZZ_SECONDS=600 bash .ci/fuzz.sh netlink http_request
set -euo pipefail
cd "$(dirname "$0")/.."

# Seconds of fuzzing per target: a smoke run of every parser in CI (the
# corpus and long runs are for FUZZ_SECONDS=600 by hand). 13 targets, two at
# a time: ~7 x this, plus the build (~3.5 min from a fresh fuzz/target on
# two idle cores), is the step's wall time: about 4.5 minutes.
FUZZ_SECONDS=${FUZZ_SECONDS:-10}
# cargo fuzz needs nightly flags (-Zsanitizer, sancov passes): allowed on the
# stable toolchain this way.
export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=never

if ! cargo fuzz --version >/dev/null 2>&1; then
  start=$(date +%s)
  cargo install --locked cargo-fuzz
  echo "fuzz: cargo-fuzz installed in $(($(date +%s) - start)) s"
fi

# Safe Rust only on the fuzzed paths: no sanitizer (it would double the build
# and halve the speed for nothing); debug assertions on, so arithmetic
# overflow is a crash; several codegen units to keep the build short.
build_start=$(date +%s)
cargo fuzz build --debug-assertions --sanitizer none --codegen-units 16
echo "fuzz: targets built in $(($(date +%s) - build_start)) s"

bin_dir=fuzz/target/x86_64-unknown-linux-gnu/release
if (($#)); then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# The dictionary each target starts with (none for binary inputs).
dict_for() {
  case $1 in
    http_request) echo fuzz/dicts/http.dict ;;
    config_yaml | web_config) echo fuzz/dicts/yaml.dict ;;
    sysfs_values) echo fuzz/dicts/sysfs.dict ;;
    replay_text) echo fuzz/dicts/replay.dict ;;
    nccl_parsers) echo fuzz/dicts/nccl.dict ;;
  esac
}

run_one() {
  local t=$1 dict
  local corpus=fuzz/corpus/$t artifacts=fuzz/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  local args=(-max_total_time="$FUZZ_SECONDS" -timeout=30 -rss_limit_mb=2048
              -print_final_stats=1 -artifact_prefix="$artifacts/")
  dict=$(dict_for "$t")
  [[ -n $dict ]] && args+=(-dict="$dict")
  # The first folder receives new inputs; the seeds are only read.
  "$bin_dir/$t" "${args[@]}" "$corpus" "fuzz/seeds/$t" >"$logs/$t.log" 2>&1
}

fuzz_start=$(date +%s)
declare -A pid_of=()
failed=()
for t in "${targets[@]}"; do
  if ((${#pid_of[@]} >= 2)); then
    wait -n || true
    for p in "${!pid_of[@]}"; do
      kill -0 "${pid_of[$p]}" 2>/dev/null || unset "pid_of[$p]"
    done
  fi
  run_one "$t" &
  pid_of[$t]=$!
done
for t in "${targets[@]}"; do
  if [[ -n ${pid_of[$t]:-} ]]; then
    wait "${pid_of[$t]}" || true
  fi
done

printf '\n%-16s %12s %10s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  log=$logs/$t.log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  size=$(find "fuzz/corpus/$t" -type f | wc -l)
  if grep -qE '^==[0-9]+== ERROR: libFuzzer|^SUMMARY: libFuzzer|panicked at|deadly signal' "$log" ||
     ! grep -q '^Done [0-9]* runs' "$log"; then
    result=FAILED
    failed+=("$t")
  else
    result=ok
  fi
  printf '%-16s %12s %10s %8s  %s\n' "$t" "${execs:-?}" "${speed:-?}" "$size" "$result"
done
echo "fuzz: ${#targets[@]} targets fuzzed in $(($(date +%s) - fuzz_start)) s (${FUZZ_SECONDS} s each, two at a time)"

if ((${#failed[@]})); then
  for t in "${failed[@]}"; do
    echo
    echo "==== fuzz target $t failed; its log:"
    tail -n 60 "$logs/$t.log"
    for a in fuzz/artifacts/"$t"/*; do
      [[ -f $a ]] || continue
      echo "---- $a ($(wc -c <"$a") bytes), base64 (decode into a file and run"
      echo "     'cargo fuzz run $t <file>' to reproduce):"
      head -c 65536 "$a" | base64
    done
  done
  exit 1
fi
