#!/usr/bin/env bash
# plumb's main job on one machine, no cluster needed: build plumb, show what it would do for the
# pod in examples/standalone/pods/demo.yaml (`plumb plan`), attach a fresh network namespace to
# its three networks (the default bridge, a second bridge with the static address the pod asks
# for, a macvlan) with the NADs of examples/standalone/nads, print the network-status and the
# namespace's addresses, then detach and show that nothing is left: no interface, no address
# held by IPAM, no record, no result cache entry. Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# PLUMB_PROFILE=dev builds faster; PLUMB_BIN runs a binary built already (the test command gives
# it the image's, from scripts/build-static.sh).
if [ -n "${PLUMB_BIN:-}" ]; then
  plumb=$PLUMB_BIN
else
  profile=${PLUMB_PROFILE:-release}
  cargo build --profile "$profile" --locked -p plumb
  case $profile in dev) dir=debug ;; *) dir=$profile ;; esac
  plumb=$PWD/target/$dir/plumb
fi
examples=$PWD/examples/standalone

work=$(mktemp -d)
ns=plumb-demo-$$
cleanup() {
  ip netns del "$ns" 2>/dev/null || true
  for l in plumbdemo0 plumbdemo1 plumbdemo-mv; do ip link del "$l" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# plumb's configuration with this run's private directories (state, result cache, host-local).
jq --arg w "$work" --arg nads "$examples/nads" '
  .plumbNadDir = $nads | .plumbStateDir = ($w + "/state") | .cniDir = ($w + "/cni")
  | .binDir = "/usr/lib/cni" | .delegates[0].ipam.dataDir = ($w + "/ipam")' \
  "$examples/plumb.conf" >"$work/plumb.conf"
mkdir -p "$work/nads"
for f in "$examples"/nads/*.yaml; do
  # host-local keeps its allocations in dataDir: a private one, so the demo shows it empty again.
  sed "s|\"ranges\"|\"dataDir\": \"$work/ipam\", \"ranges\"|" "$f" >"$work/nads/$(basename "$f")"
done
ip netns add "$ns"
ip link add plumbdemo-mv type bridge && ip link set plumbdemo-mv up

export CNI_PATH=/usr/lib/cni
echo "== plumb plan --pod examples/standalone/pods/demo.yaml (nothing is run)"
"$plumb" plan --pod "$examples/pods/demo.yaml" --nads "$work/nads" --config "$work/plumb.conf" |
  jq -c '.attachments[] | {network, interface, plugins: [.plugins[].type]}'

echo "== plumb attach --netns $ns (network-status follows)"
"$plumb" attach --netns "$ns" --pod "$examples/pods/demo.yaml" --nads "$work/nads" \
  --config "$work/plumb.conf"
echo "== ip -n $ns -br addr"
ip -n "$ns" -br addr

echo "== plumb detach --netns $ns"
"$plumb" detach --netns "$ns" --config "$work/plumb.conf"
echo "== after detach: interfaces, addresses held by host-local, records, result cache"
ip -n "$ns" -br link
find "$work/ipam" -type f -regex '.*/[0-9a-f.:]+$' | grep . && { echo "demo: addresses left"; exit 1; }
echo "(no addresses held)"
ls -A "$work/state" | grep . && { echo "demo: records left"; exit 1; }
echo "(no records)"
ls -A "$work/cni/results" | grep . && { echo "demo: cache entries left"; exit 1; }
echo "(no result cache entries)"
[ "$(ip -n "$ns" -br link | wc -l)" -eq 1 ] || { echo "demo: interfaces left"; exit 1; }
echo "demo: OK"
