#!/usr/bin/env bash
# make soak: the order property (jobs.TestAnyOrderAnyDuplicatesSameBooks) for
# SOAK_CHECKS cases against a real PostgreSQL; the shrunk counterexample of a
# failure is printed and kept under jobs/testdata/rapid for a replay.
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_DATABASE_URL="${TEST_DATABASE_URL:-$(scripts/db.sh postgres)}"
export TEST_DATABASE_URL
checks="${SOAK_CHECKS:-3000}"
echo "soak: $checks cases of the order property (about 0.7 s each)" >&2
go test -count=1 -timeout 4h -run '^TestAnyOrderAnyDuplicatesSameBooks$' ./jobs/ -rapid.checks="$checks" -v 2>&1 |
  grep -v '^\s*order_property_test.go:[0-9]*: \[rapid\] draw' || exit "${PIPESTATUS[0]}"
