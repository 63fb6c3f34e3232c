#!/usr/bin/env bash
# Installs Debian's Chromium for the console's browser tests (chromedp drives
# it headless) when no chromium is on PATH, then prints its version. Safe to
# run again: an installed chromium is left as it is.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
	"$(dirname "$0")/apt-install.sh" chromium
fi
chromium --version
