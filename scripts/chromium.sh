#!/usr/bin/env bash
# Installs Debian's Chromium for the console's browser tests (chromedp drives
# it headless) when no chromium is on PATH, then prints its version. Safe to
# run again: an installed chromium is left as it is.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
	sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null 2>&1 || { echo "chromium.sh: run as root (or install sudo) to install chromium" >&2; exit 1; }
		sudo=(sudo)
	fi
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get update -qq
	"${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
chromium --version
