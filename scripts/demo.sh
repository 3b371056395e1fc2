#!/usr/bin/env bash
# plumb's main job, for now: build plumb, attach a fresh network namespace to the example
# network (bridge + host-local, tuning setting the MAC, portmap publishing a port) with
# `plumb cni add`, show the result and the namespace's addresses, then `plumb cni del` it and
# show that nothing is left. Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cargo build --release --locked -p plumb
plumb=$PWD/target/release/plumb

work=$(mktemp -d)
ns=plumb-demo-$$
cleanup() {
  ip netns del "$ns" 2>/dev/null || true
  ip link del plumbdemo0 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/net.d"
# host-local keeps its allocations in dataDir: a private one, so the demo shows it empty again.
jq --arg d "$work/ipam" '.plugins[0].ipam.dataDir = $d' examples/cni/10-demo.conflist \
  >"$work/net.d/10-demo.conflist"
ip netns add "$ns"

export NETCONFPATH=$work/net.d CNI_PATH=/usr/lib/cni CNI_CACHE_DIR=$work/cache
export CAP_ARGS='{"mac":"02:00:00:00:de:01","portMappings":[{"hostPort":18080,"containerPort":80,"protocol":"tcp"}]}'

echo "== plumb cni add plumb-demo $ns"
"$plumb" cni add plumb-demo "$ns"
echo "== ip -n $ns addr show eth0"
ip -n "$ns" addr show eth0
echo "== result cache"
ls "$work/cache/results"
echo "== plumb cni del plumb-demo $ns"
"$plumb" cni del plumb-demo "$ns"
echo "== after del: interfaces in $ns, cache entries, host-local allocations"
ip -n "$ns" -br link
ls -A "$work/cache/results"
ls "$work/ipam/plumb-demo" | grep -E '^[0-9a-f.:]+$' || echo "(no addresses allocated)"
echo "demo: OK"
