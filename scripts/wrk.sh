#!/usr/bin/env bash
# Installs Debian's wrk, the sender of `make bench`, when no wrk is on PATH
# (pinned: the version the benchmark's figures were measured with), then
# prints the version in use. An installed wrk is left as it is, whatever
# its version: the version is printed with the results instead.
set -euo pipefail
pinned=4.1.0-3+b2
if ! command -v wrk >/dev/null 2>&1; then
	"$(dirname "$0")/apt-install.sh" "wrk=$pinned"
fi
# wrk -v prints its version and then its usage, and exits 1.
version=$(dpkg-query -W -f='${Version}' wrk 2>/dev/null || true)
[[ -n "$version" ]] || version=$({ wrk -v 2>&1 || true; } | sed -nE '1s/^wrk ([^ ]+).*/\1/p')
if [[ "$version" != "$pinned" ]]; then
	echo "wrk.sh: wrk $version is installed; the documented figures were measured with $pinned" >&2
fi
echo "$version"
