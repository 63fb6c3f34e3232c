#!/usr/bin/env bash
# make run: a database (see scripts/db.sh), migrations, development defaults,
# then `paygate serve` in the foreground. Every default can be overridden
# from the environment.
#
# Migrations run as the database's owner; serve runs as paygate_app, the
# least-privileged role `paygate migrate` creates (docs/operations.md,
# "Database roles"): the local servers db.sh finds or starts trust local connections,
# so it logs in without a password. A DATABASE_URL of your own is used as
# given for both.
set -euo pipefail
cd "$(dirname "$0")/.."
own_url="${DATABASE_URL:-}"
DATABASE_URL="$(scripts/db.sh paygate)"
export DATABASE_URL
export PAYGATE_ADDR="${PAYGATE_ADDR:-127.0.0.1:8080}"
# Development-only secrets: never use these anywhere real.
export PAYGATE_STRIPE_WEBHOOK_SECRETS="${PAYGATE_STRIPE_WEBHOOK_SECRETS:-whsec_dev_paygate_local}"
export PAYGATE_ADYEN_HMAC_KEYS="${PAYGATE_ADYEN_HMAC_KEYS:-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}"
export PAYGATE_ADYEN_BASIC_AUTH="${PAYGATE_ADYEN_BASIC_AUTH-adyen:dev-adyen-password}"
export PAYGATE_STANDARD_WEBHOOK_SOURCES="${PAYGATE_STANDARD_WEBHOOK_SOURCES:-polar=whsec_cGF5Z2F0ZSBkZXZlbG9wbWVudCBzZWNyZXQ=}"
export PAYGATE_OPS_TOKENS="${PAYGATE_OPS_TOKENS:-dev-ops-token}"
export PAYGATE_FINANCE_TOKENS="${PAYGATE_FINANCE_TOKENS:-dev-finance-token}"
export PAYGATE_CONSUMER_TOKENS="${PAYGATE_CONSUMER_TOKENS:-dev-consumer-token}"
# Endpoints on this machine (http://127.0.0.1:…) receive messages.
export PAYGATE_DELIVERY_ALLOW_PRIVATE="${PAYGATE_DELIVERY_ALLOW_PRIVATE:-true}"
[[ -x scripts/dev-services.sh ]] && source scripts/dev-services.sh

bin/paygate migrate
if [[ -z "$own_url" ]]; then
  DATABASE_URL="${DATABASE_URL/\/\/postgres@/\/\/paygate_app@}"
fi
secret="${PAYGATE_STRIPE_WEBHOOK_SECRETS%%,*}"
ops="${PAYGATE_OPS_TOKENS%%,*}"
# bin/paygate demo reads the same environment, with these defaults when a
# fresh shell has none: the command names what differs.
demo=""
if [[ -n "${_dev_demo_url:-}" ]]; then
  demo_env=()
  [[ "$PAYGATE_ADDR" != 127.0.0.1:8080 ]] && demo_env+=("PAYGATE_ADDR=$PAYGATE_ADDR")
  [[ "$_dev_demo_url" != http://127.0.0.1:12111 ]] && demo_env+=("PAYGATE_STRIPE_API_URL=$_dev_demo_url")
  [[ "$ops" != dev-ops-token ]] && demo_env+=("PAYGATE_OPS_TOKENS=$ops")
  [[ "${PAYGATE_FINANCE_TOKENS%%,*}" != dev-finance-token ]] && demo_env+=("PAYGATE_FINANCE_TOKENS=${PAYGATE_FINANCE_TOKENS%%,*}")
  demo="bin/paygate demo"
  ((${#demo_env[@]})) && demo="$(printf '%q ' "${demo_env[@]}")$demo"
  demo="
See paygate at work (paste into another shell): a day of a shop's Stripe and
Adyen payments through the webhooks, refunds through paygate, a
reconciliation and deliveries to the shop's endpoint, then what to open in
the console (README, \"Console tour\"):

  $demo
"
fi
cat <<MSG

paygate (development) on http://$PAYGATE_ADDR
  console         http://$PAYGATE_ADDR/console/   (sign in with a token below)
  database        $(sed -E 's#//([^:@]*)(:[^@]*)?@#//\1@#' <<<"$DATABASE_URL")
  webhook secret  $secret   (Stripe)
  Adyen HMAC key  ${PAYGATE_ADYEN_HMAC_KEYS%%,*}   Basic auth ${PAYGATE_ADYEN_BASIC_AUTH:-none}
  Standard Webhooks sources  ${PAYGATE_STANDARD_WEBHOOK_SOURCES%%=*}   (docs/providers.md, "Standard Webhooks")
  ops token       $ops      finance token  ${PAYGATE_FINANCE_TOKENS%%,*}
$demo
Send a signed test event (paste into another shell):

  payload='{"id":"evt_test_'\$RANDOM\$RANDOM'","object":"event","api_version":"2024-06-20","created":'\$(date +%s)',"livemode":false,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_test_1","object":"payment_intent","amount":36000,"amount_received":36000,"currency":"usd","status":"succeeded","latest_charge":"ch_test_1"}}}'
  t=\$(date +%s); sig=\$(printf '%s.%s' "\$t" "\$payload" | openssl dgst -sha256 -hmac '$secret' | sed 's/^.* //')
  curl -s -X POST http://$PAYGATE_ADDR/webhooks/stripe -H "Stripe-Signature: t=\$t,v1=\$sig" -H 'Content-Type: application/json' --data-raw "\$payload"; echo
  curl -s -H 'Authorization: Bearer $ops' http://$PAYGATE_ADDR/v1/ops/stats

Receive messages at a local endpoint (docs/downstream.md; its consumer.go listens on :9000):

  curl -s -X POST http://$PAYGATE_ADDR/v1/endpoints -H 'Authorization: Bearer $ops' -H "Idempotency-Key: endpoint-\$RANDOM" \
    -H 'Content-Type: application/json' -d '{"url":"http://127.0.0.1:9000/paygate","event_types":["*"]}'
  curl -s -H 'Authorization: Bearer ${PAYGATE_CONSUMER_TOKENS%%,*}' 'http://$PAYGATE_ADDR/v1/feed?wait=5s'

MSG
exec bin/paygate serve
