#!/usr/bin/env bash
# Installs the pinned Go tools that tests and `make run` use into ./.tools/bin
# (git-ignored), with `go install` from the Go module proxy. A tool already
# there at its pinned version is not rebuilt (checked with `go version -m`),
# so this is cheap to call before every test run. scripts/test.sh calls it.
#
#   mailpit      the SMTP server the email tests and `make run` use
#   stripe-mock  Stripe's API mock, for the reconciliation's request-shape test
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$PWD/.tools/bin"
mkdir -p "$bin"

# install <module> <version> [<package>]: the binary is named after the
# package's last path element.
install() {
  local module="$1" version="$2" pkg="${3:-$1}"
  local name="${pkg##*/}"
  if [[ -x "$bin/$name" ]] &&
    go version -m "$bin/$name" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+${module//./\\.}[[:space:]]+${version//./\\.}([[:space:]]|$)"; then
    return 0
  fi
  echo "tools: installing $pkg@$version into .tools/bin (the first build takes a while)" >&2
  GOBIN="$bin" go install "$pkg@$version"
}

install github.com/axllent/mailpit v1.33.1
install github.com/stripe/stripe-mock v0.203.0
