#!/bin/bash
# Render an HTML report in headless Chromium and save a full-page PNG, to look at it.
#   scripts/screenshot-report.sh demo/report.html demo/report.png
# Needs Debian's chromium (apt-get install chromium); not part of `make setup`.
set -euo pipefail
in=$(realpath "$1"); out=${2:-${1%.html}.png}
prof=$(mktemp -d)
trap 'rm -rf "$prof"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$prof" --hide-scrollbars --window-size=1280,6000 \
  --screenshot="$(realpath -m "$out")" "file://$in" 2>/dev/null
echo "wrote $out"
