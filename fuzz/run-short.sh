#!/usr/bin/env bash
# Runs every cargo-fuzz target of this crate for a short time each (default 20 s; the first
# argument overrides), seeded from fuzz/seeds/<target> when that folder exists. Exits non-zero
# if any target crashes, times out or runs out of memory; the input that did it is left in
# fuzz/artifacts/<target>/ and printed with the command that replays it.
#
#   fuzz/run-short.sh [SECONDS]
#
# Needs the nightly toolchain (cargo +nightly) and cargo-fuzz, which it installs from crates.io
# when missing. Without a nightly toolchain it falls back to the default one with
# RUSTC_BOOTSTRAP=1 (the -Z flags cargo-fuzz passes are otherwise nightly-only).
set -euo pipefail
cd "$(dirname "$0")"

secs=${1:-20}
case $secs in
  '' | *[!0-9]*)
    echo "usage: $0 [SECONDS]" >&2
    exit 2
    ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "run-short: installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

if rustup run nightly rustc --version >/dev/null 2>&1; then
  fuzz=(cargo +nightly fuzz)
else
  echo "run-short: no nightly toolchain; using $(rustc --version) with RUSTC_BOOTSTRAP=1"
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi

# -a: debug assertions, and with them overflow checks, in the code under test.
build_flags=(-a)
listed=$("${fuzz[@]}" list)
mapfile -t targets <<<"$listed"
if [ -z "$listed" ]; then
  echo "run-short: no fuzz targets found" >&2
  exit 1
fi

echo "run-short: building ${#targets[@]} targets: ${targets[*]}"
"${fuzz[@]}" build "${build_flags[@]}"

failed=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  dirs=("corpus/$t")
  [ -d "seeds/$t" ] && dirs+=("seeds/$t")
  echo "run-short: $t for ${secs}s (corpus: ${dirs[*]})"
  log=$(mktemp)
  if "${fuzz[@]}" run "${build_flags[@]}" "$t" "${dirs[@]}" -- \
    -max_total_time="$secs" -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added):' "$log" |
      sed "s/^/run-short: $t /" || true
  else
    rc=$?
    tail -n 60 "$log"
    echo "run-short: $t FAILED (exit $rc)" >&2
    for a in artifacts/"$t"/*; do
      [ -e "$a" ] && echo "run-short: replay: (cd fuzz && ${fuzz[*]} run ${build_flags[*]} $t $a)" >&2
    done
    failed+=("$t")
  fi
  rm -f "$log"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "run-short: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}" >&2
  exit 1
fi
echo "run-short: ${#targets[@]} passed, 0 failed"
