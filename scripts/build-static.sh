#!/usr/bin/env bash
# Builds the plumb binary the image holds, statically linked against glibc (crt-static), so that
# it runs on any x86_64 node whatever its C library, and copies it to OUTPUT (default
# target/static/plumb). The image's build stage (Containerfile) runs this script and nothing
# else; the test suite runs it too, with PLUMB_PROFILE=dev (the release profile's LTO takes many
# minutes), and checks what it gives. x86_64 only.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/static/plumb}
profile=${PLUMB_PROFILE:-release}
target=x86_64-unknown-linux-gnu
if [ "$(uname -m)" != x86_64 ]; then
  echo "build-static: builds for x86_64 only; this machine is $(uname -m)" >&2
  exit 1
fi
RUSTFLAGS='-C target-feature=+crt-static' \
  cargo build --locked --profile "$profile" -p plumb --target "$target"
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
bin=target/$target/$dir/plumb
# No dynamic loader, no shared library: it runs in an image FROM scratch and on any node.
case "$(ldd "$bin" 2>&1)" in
  *"statically linked"* | *"not a dynamic executable"*) ;;
  *)
    echo "build-static: $bin is dynamically linked:" >&2
    ldd "$bin" >&2
    exit 1
    ;;
esac
# It starts, and answers as a CNI plugin.
CNI_COMMAND=VERSION "$bin" </dev/null | grep -q supportedVersions
mkdir -p "$(dirname "$out")"
cp "$bin" "$out.tmp"
mv "$out.tmp" "$out"
echo "build-static: $out ($("$out" --version), $(stat -c %s "$out") bytes, static)"
