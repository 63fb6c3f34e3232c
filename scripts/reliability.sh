#!/usr/bin/env bash
# make reliability: the reliability and security suite (docs/reliability.md).
#   1. every fuzz target for $FUZZTIME each (default 30s);
#   2. the security tests, with the slow ones (a body trickled for 30s);
#   3. the fault scenarios at full size (PAYGATE_RELIABILITY=long): SIGKILLs
#      under load, two and three instances on one database, a private
#      PostgreSQL restarted, crashed and cut off mid-load, with a poison share;
#      then the total-queue table and a scan of every gateway's logs.
# `scripts/reliability.sh fuzz` runs step 1 only. PAYGATE_RELIABILITY_SEED
# replays a scenario run. Everything it starts is stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_DATABASE_URL="${TEST_DATABASE_URL:-$(scripts/db.sh postgres)}"
export TEST_DATABASE_URL
FUZZTIME="${FUZZTIME:-30s}"
start=$SECONDS

fuzz() { # package target
  echo "== fuzz $2 in $1 for $FUZZTIME"
  go test "$1" -run '^$' -fuzz "^$2\$" -fuzztime "$FUZZTIME" 2>&1 | grep -v '^fuzz: elapsed' || return 1
}
fuzz ./provider/stripe FuzzParseSignatureHeader
fuzz ./provider/stripe FuzzDecodeStripeEvent
fuzz ./provider/stripe FuzzStripeEffects
fuzz ./provider/adyen FuzzReceive
fuzz ./provider/adyen FuzzEffects
fuzz ./provider/stdwebhooks FuzzReceive
fuzz ./webhook FuzzStoredIdentityMatchesPostgres
fuzz ./strictjson FuzzUnmarshal
fuzz ./strictjson FuzzDecodeMatchesEncodingJSON
fuzz ./api FuzzParseIdempotencyKey
[[ "${1:-}" == fuzz ]] && exit 0

export PAYGATE_RELIABILITY=long
echo "== security tests"
go test -count=1 -timeout 5m \
  -run 'TestServerTimeoutsAreSet|TestSlowClientsAreCutOff|TestWebhookLimitsOnTheWire|TestEveryProtectedRouteRefusesBadCredentials|TestHostileFilterStrings|TestSignatureComparisonIsConstantTime|TestTimestampWindowBothWays|TestBodyLimitBeforeAnythingElse|TestUnstorableIdentifiersAreRefused|TestTokenComparisonIsConstantTime|TestHostileSignedPayloads|TestHostileSignedBodiesAreRefused|TestDistinctInvalidIDsAreNotMerged|TestStoredIdentityIsWhatPostgresReads|TestEventViewAnswerIsBoundedByThePayload|TestV1BodiesAreReadAsEveryReaderReadsThem|TestBulkReplayNeedsAFilter|TestIdempotencyFingerprintIsTheDecodedRequest|TestRequestsAreBoundedInTime' \
  ./cmd/paygate ./webhook ./api ./provider/...

echo "== fault scenarios (PAYGATE_RELIABILITY=long)"
report="$(mktemp)"
log="$(mktemp --suffix=.log)"
trap 'rm -f "$report"' EXIT
set +e
PAYGATE_RELIABILITY_REPORT="$report" go test -count=1 -timeout 14m -v ./internal/reliability >"$log" 2>&1
status=$?
set -e
grep -E '^(--- |\s+--- |PASS|FAIL|ok|log scan|reliability:)|TARGET|PROBLEM|Error Trace|Error:|Messages:|seed' "$log" || true
echo
cat "$report" 2>/dev/null || true
echo "reliability suite: $(( (SECONDS - start) / 60 ))m$(( (SECONDS - start) % 60 ))s"
if [[ $status -ne 0 ]]; then
  echo "FAILED: the scenarios' full output is in $log"
  exit "$status"
fi
rm -f "$log"
