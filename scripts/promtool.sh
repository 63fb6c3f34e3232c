#!/usr/bin/env bash
# Installs Debian's prometheus package for its promtool (make test checks
# and unit-tests deploy/prometheus/alerts.yml with it) when no promtool is
# on PATH, then checks that it is a 2.x promtool, whose rule and test file
# formats deploy/ is written for. Safe to run again: an installed promtool
# is left as it is. The package's own service is not started (Debian's
# policy in containers; on a workstation `systemctl disable --now
# prometheus` stops it).
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
	"$(dirname "$0")/apt-install.sh" prometheus
fi
version=$(promtool --version 2>&1 | head -n1)
if [[ ! $version =~ version\ 2\.[0-9]+ ]]; then
	echo "promtool.sh: want promtool 2.x (Debian's prometheus package), have: $version" >&2
	exit 1
fi
echo "$version"
