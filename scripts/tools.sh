#!/usr/bin/env bash
# Installs the pinned Go tools that tests and `make run` use into ./.tools/bin
# (git-ignored), with `go install` from the Go module proxy. A tool already
# there at its pinned version is not rebuilt (checked with `go version -m`),
# so this is cheap to call before every test run. scripts/test.sh calls it.
#
#   mailpit      the SMTP server the email tests and `make run` use
#   stripe-mock  Stripe's API mock, for the reconciliation's request-shape test
#   oapi-codegen the client generator; api's test checks api/client is current
#
# and, with npm, Redocly CLI into ./.tools/redocly, for api's lint of the
# OpenAPI document (TestOpenAPILintsClean).
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
install github.com/oapi-codegen/oapi-codegen/v2 v2.8.2 github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen

# --- Redocly CLI, pinned, for the OpenAPI lint (api/contract_lint_test.go) ---
# From the npm registry into .tools/redocly (git-ignored); skipped when that
# version is already there. The test names this command when it is missing.
redocly_version=2.77.0
if [[ "$(.tools/redocly/node_modules/.bin/redocly --version 2>/dev/null | head -n 1)" != "$redocly_version" ]]; then
  echo "tools: installing @redocly/cli@$redocly_version into .tools/redocly" >&2
  command -v npm >/dev/null 2>&1 || scripts/apt-install.sh nodejs npm # Debian's Node.js
  npm install --prefix .tools/redocly --save-exact --no-audit --no-fund --loglevel=error "@redocly/cli@$redocly_version"
fi
# --- end Redocly CLI ---

# --- stripe-mock OpenAPI specs for internal/stripesim's schema test ---
# The test validates the simulator's objects against the OpenAPI spec that
# stripe-mock releases embed (embedded/openapi/spec3.json), read from the Go
# module cache: v0.162.0 (API 2022-11-15) and v0.203.0 (2026-08-26.dahlia),
# the releases either side of the pinned 2024-06-20. The install above
# already caches v0.203.0; both are named so the test never depends on it.
# A no-op when they are cached; go.mod and go.sum are not touched.
go mod download github.com/stripe/stripe-mock@v0.162.0 github.com/stripe/stripe-mock@v0.203.0
# --- end stripe-mock OpenAPI specs ---
