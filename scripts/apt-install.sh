#!/usr/bin/env bash
# Installs Debian packages (arguments as apt-get takes them, e.g.
# wrk=4.1.0-3+b2), as root or through sudo. The project's scripts call it
# for what they need when it is missing; it installs nothing else.
set -euo pipefail
sudo=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null 2>&1 || { echo "apt-install.sh: run as root (or install sudo) to install $*" >&2; exit 1; }
	sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
