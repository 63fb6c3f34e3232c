#!/usr/bin/env bash
# Installs Debian's nats-server (JetStream included) when none is on PATH or
# in /usr/sbin, then prints the path of the one in use. Nothing is pinned
# beyond the distribution's version: the version is printed on stderr, and
# `make bench` prints it with its figures.
set -euo pipefail
find_nats() { command -v nats-server 2>/dev/null || { [[ -x /usr/sbin/nats-server ]] && echo /usr/sbin/nats-server; }; }
bin=$(find_nats || true)
if [[ -z "$bin" ]]; then
	"$(dirname "$0")/apt-install.sh" nats-server
	bin=$(find_nats) || { echo "nats-server.sh: nats-server not found after installing it" >&2; exit 1; }
fi
version=$(dpkg-query -W -f='${Version}' nats-server 2>/dev/null || true)
echo "nats-server.sh: $("$bin" --version 2>&1 | head -1)${version:+ (Debian $version)} at $bin" >&2
echo "$bin"
