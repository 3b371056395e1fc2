#!/usr/bin/env bash
# Installs the Debian packages plumb's demo and tests need: the reference CNI plugins
# (/usr/lib/cni), iproute2 (ip netns), iptables (for the portmap plugin), jq and python3.
set -euo pipefail
need=()
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v ip >/dev/null || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
command -v jq >/dev/null || need+=(jq)
# The default-route tests send IPv6 router advertisements with a few lines of Python.
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install: ${need[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
  echo "install-deps: cargo not found: install Rust first (https://rustup.rs)" >&2
  exit 1
fi
