#!/usr/bin/env bash
# The dashboard's browser tests: Debian's Chromium (apt-get install chromium) driven by
# playwright-core from the lockfile, against target/debug/tenax (cargo build -p tenax first).
# Never downloads a browser. TENAX_UI_SCREENSHOTS=<dir> saves each page as a PNG.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x /usr/bin/chromium ]; then
    echo "Chromium is missing: apt-get install -y chromium" >&2
    exit 1
fi
npm ci --no-audit --no-fund
export TENAX_BIN="${TENAX_BIN:-$(pwd)/../../target/debug/tenax}"
node --test --test-reporter=spec dashboard.test.mjs
