#!/usr/bin/env bash
# The whole test suite: formatting, lints, every test (the network-namespace ones need root and
# run with the reference plugins from Debian's containernetworking-plugins), and short fuzz runs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
if cargo deny --version >/dev/null 2>&1; then
  echo "== cargo deny (licences, duplicate versions: deny.toml)"
  cargo deny --offline check licenses bans
fi
echo "== cargo test"
cargo test --workspace --locked
echo "== the image's binary (scripts/build-static.sh, the Containerfile's one step; dev profile)"
PLUMB_PROFILE=dev ./scripts/build-static.sh target/static/plumb
echo "== the demo (README's main job), on that binary"
PLUMB_BIN=$PWD/target/static/plumb ./scripts/demo.sh
if [ -x fuzz/run-short.sh ] && [ "${PLUMB_SKIP_FUZZ:-}" != 1 ]; then
  echo "== short fuzz runs"
  # 10 s a target: with the image's static build above, CI stays near 26 minutes.
  fuzz/run-short.sh "${PLUMB_FUZZ_SECONDS:-10}"
fi
