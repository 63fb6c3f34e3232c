#!/usr/bin/env bash
# make test: make sure PostgreSQL and the test tools are there, then run every
# test (unit, real-database, fuzz seed corpora, end to end) once.
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_DATABASE_URL="${TEST_DATABASE_URL:-$(scripts/db.sh postgres)}"
export TEST_DATABASE_URL
[[ -x scripts/tools.sh ]] && scripts/tools.sh
scripts/chromium.sh # Debian's Chromium, for the console's browser tests
scripts/promtool.sh # Debian's promtool, for the alert rules
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml
export PATH="$PWD/.tools/bin:$PATH"
go vet ./...
go test -count=1 -timeout 20m "$@" ./...
