#!/bin/bash
# System part of `make setup` (as root, Debian 12): the OS packages valkeytrace needs.
# Idempotent and silent when nothing is missing. Mounts and the kernel-headers link are done
# afterwards by `valkeytrace doctor --fix` (one implementation, in src/valkeytrace/system.py).
set -euo pipefail

arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
release=$(uname -r)
want=(python3-bpfcc bpfcc-tools bpftool binutils redis-tools python3-venv python3-dev python3-pip gcc make libc6-dev
      strace bpftrace linux-perf  # benchmarks/peers.py compares valkeytrace with them
      chromium)  # tests/integration/test_html.py looks at the HTML report as a reader does

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# kernel headers: the running kernel's own if the distribution has them, else the nearest
# (Debian's linux-headers-$arch); doctor --fix then links them, with a warning.
headers_ok=0
[ -d "/lib/modules/$release/build/include" ] && headers_ok=1
if [ $headers_ok = 0 ] && ! ls -d /usr/src/linux-headers-*-"$arch" >/dev/null 2>&1; then
  missing+=("linux-headers-$release")
fi

[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "setup: missing OS packages (${missing[*]}); run 'make setup' as root" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# the running kernel's headers may not be packaged: fall back to the distribution's default
pkgs=()
for p in "${missing[@]}"; do
  if [ "$p" = "linux-headers-$release" ] && ! apt-cache show "$p" >/dev/null 2>&1; then
    echo "setup: WARNING: no $p package; installing linux-headers-$arch (another kernel version)"
    p="linux-headers-$arch"
  fi
  pkgs+=("$p")
done
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
