#!/usr/bin/env bash
# Assembles plumb's image without a registry or a build stage: the binary of
# scripts/build-static.sh (built here, release profile unless PLUMB_PROFILE says otherwise) put
# alone in an image FROM scratch, as the Containerfile's final stage does, with Debian's buildah
# (apt-get install buildah). Commits it to local storage as IMAGE (default: the tag the
# manifests in deploy/ pin) and writes it as an OCI archive, target/plumb-image.tar, for
# `podman load`, `ctr -n k8s.io images import` or `kind load image-archive`. x86_64 only.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
image=${1:-ghcr.io/plumb-cni/plumb:v$version}
if ! command -v buildah >/dev/null; then
  echo "image: buildah is not installed (apt-get install buildah)" >&2
  exit 1
fi
./scripts/build-static.sh target/static/plumb
ctr=$(buildah from scratch)
trap 'buildah rm "$ctr" >/dev/null' EXIT
buildah copy --chmod 0755 "$ctr" target/static/plumb /plumb >/dev/null
buildah config --entrypoint '["/plumb"]' --arch amd64 --os linux \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.title=plumb "$ctr"
buildah commit --quiet "$ctr" "$image" >/dev/null
rm -f target/plumb-image.tar
buildah push --quiet "$image" "oci-archive:target/plumb-image.tar:$image"
echo "image: $image, target/plumb-image.tar ($(stat -c %s target/plumb-image.tar) bytes)"
