# shellcheck shell=bash
# Sourced by scripts/run.sh (`make run`): local stand-ins for the services
# paygate talks to, so that a fresh checkout shows everything working.
#
# Mailpit, unless PAYGATE_SMTP_URL is already set: an SMTP server whose web
# UI shows every email paygate sends (receipts, refund confirmations, ops
# alerts). Installed at its pinned version by scripts/tools.sh, listening on
# 127.0.0.1 ports 1025 (SMTP) and 8025 (web UI), or the next free ones
# (PAYGATE_MAILPIT_SMTP_PORT / PAYGATE_MAILPIT_UI_PORT to choose). It stops
# when paygate stops; its messages are kept in .tools/run/mailpit.db.
# Exports PAYGATE_SMTP_URL, and development defaults for PAYGATE_EMAIL_FROM
# and PAYGATE_OPS_EMAIL when they are unset; then the demo's shop as
# paygate's Stripe and Adyen (below).

_dev_listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
_dev_free_port() {
  local p="$1"
  while _dev_listening "$p"; do p=$((p + 1)); done
  echo "$p"
}

_dev_start_mailpit() {
  if ! scripts/tools.sh || [[ ! -x .tools/bin/mailpit ]]; then
    echo "dev: could not install mailpit (see above): emails will be recorded as skipped, none sent" >&2
    return 0
  fi
  mkdir -p .tools/run
  local smtp ui pid i
  smtp=$(_dev_free_port "${PAYGATE_MAILPIT_SMTP_PORT:-1025}")
  ui=$(_dev_free_port "${PAYGATE_MAILPIT_UI_PORT:-8025}")
  .tools/bin/mailpit --smtp "127.0.0.1:$smtp" --listen "127.0.0.1:$ui" \
    --database .tools/run/mailpit.db --disable-version-check --smtp-disable-rdns --quiet \
    </dev/null >.tools/run/mailpit.log 2>&1 &
  pid=$!
  # run.sh ends with `exec paygate serve`, which keeps this shell's pid:
  # stop mailpit when that process is gone.
  (while kill -0 $$ 2>/dev/null; do sleep 1; done; kill "$pid" 2>/dev/null) </dev/null >/dev/null 2>&1 &
  for ((i = 0; i < 100; i++)); do
    _dev_listening "$smtp" && _dev_listening "$ui" && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "dev: mailpit exited (see .tools/run/mailpit.log): emails will be recorded as skipped, none sent" >&2
      return 0
    fi
    sleep 0.1
  done
  export PAYGATE_SMTP_URL="smtp://127.0.0.1:$smtp"
  export PAYGATE_EMAIL_FROM="${PAYGATE_EMAIL_FROM:-paygate@localhost}"
  export PAYGATE_OPS_EMAIL="${PAYGATE_OPS_EMAIL:-ops@localhost}"
  echo "dev: mailpit catches every email paygate sends: web UI http://127.0.0.1:$ui (SMTP 127.0.0.1:$smtp)" >&2
}

# stripe-mock, with PAYGATE_DEV_STRIPE=stripe-mock: Stripe's own API
# stand-in (pinned by scripts/tools.sh), so that refunds started from
# paygate are submitted and a requested reconciliation run completes
# locally. It answers with Stripe's canned fixtures, whatever was asked:
# no webhooks follow, so a refund stays submitted. Listening on 127.0.0.1
# port 12111 or the next free one (PAYGATE_STRIPE_MOCK_PORT to choose).
_dev_start_stripe_mock() {
  if [[ ! -x .tools/bin/stripe-mock ]] && ! scripts/tools.sh; then
    echo "dev: could not install stripe-mock (see above): refunds and reconciliation need PAYGATE_STRIPE_API_KEY" >&2
    return 0
  fi
  mkdir -p .tools/run
  local port pid i
  port=$(_dev_free_port "${PAYGATE_STRIPE_MOCK_PORT:-12111}")
  .tools/bin/stripe-mock -http-addr "127.0.0.1:$port" </dev/null >.tools/run/stripe-mock.log 2>&1 &
  pid=$!
  (while kill -0 $$ 2>/dev/null; do sleep 1; done; kill "$pid" 2>/dev/null) </dev/null >/dev/null 2>&1 &
  for ((i = 0; i < 100; i++)); do
    _dev_listening "$port" && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "dev: stripe-mock exited (see .tools/run/stripe-mock.log): refunds and reconciliation need PAYGATE_STRIPE_API_KEY" >&2
      return 0
    fi
    sleep 0.1
  done
  export PAYGATE_STRIPE_API_KEY="sk_test_devpaygatelocal" # stripe-mock takes any sk_test_ key of letters and digits
  export PAYGATE_STRIPE_API_URL="http://127.0.0.1:$port"
  echo "dev: stripe-mock stands in for Stripe's API at $PAYGATE_STRIPE_API_URL (canned answers, no webhooks)" >&2
}

# The demo's shop, unless PAYGATE_STRIPE_API_KEY is already set: the
# project's Stripe and Adyen simulators (`paygate demo serve`; README,
# "Console tour") answer as paygate's Stripe API and, unless
# PAYGATE_ADYEN_API_KEY is set, its Adyen Checkout API. So the daily
# reconciliation paygate runs at start reads an account that matches its
# books, a refund of the shop's payments started from paygate settles with
# the provider's webhooks, and `bin/paygate demo` sends the shop's day. The
# shop keeps its payments in .tools/run/demo-world.jsonl across restarts (the
# demo refuses to play when the database holds another shop's orders, or none
# of this one's);
# it delivers to PAYGATE_ADDR with the secrets above, and stops when
# paygate stops. Listening on 127.0.0.1 port 12111 or the next free one
# (PAYGATE_DEMO_PORT to choose). PAYGATE_DEV_STRIPE=stripe-mock starts
# stripe-mock instead, as make run did before: Stripe's canned fixtures
# whatever was asked, no webhooks, and a daily run that reports those
# fixtures missing from the ledger.
_dev_start_demo_world() {
  mkdir -p .tools/run
  local port pid i
  port=$(_dev_free_port "${PAYGATE_DEMO_PORT:-12111}")
  export PAYGATE_STRIPE_API_KEY="sk_test_devpaygatelocal"
  export PAYGATE_STRIPE_API_URL="http://127.0.0.1:$port"
  if [[ -z "${PAYGATE_ADYEN_API_KEY:-}" ]]; then
    export PAYGATE_ADYEN_API_KEY="AQE_dev_paygate_local"
    export PAYGATE_ADYEN_MERCHANT_ACCOUNT="${PAYGATE_ADYEN_MERCHANT_ACCOUNT:-PaygateDev}"
    export PAYGATE_ADYEN_CHECKOUT_URL="http://127.0.0.1:$port/checkout/v71"
  fi
  bin/paygate demo serve --listen "127.0.0.1:$port" --journal .tools/run/demo-world.jsonl \
    </dev/null >.tools/run/demo.log 2>&1 &
  pid=$!
  (while kill -0 $$ 2>/dev/null; do sleep 1; done; kill "$pid" 2>/dev/null) </dev/null >/dev/null 2>&1 &
  for ((i = 0; i < 100; i++)); do
    _dev_listening "$port" && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "dev: the demo's shop exited (see .tools/run/demo.log): refunds and reconciliation need PAYGATE_STRIPE_API_KEY" >&2
      unset PAYGATE_STRIPE_API_KEY PAYGATE_STRIPE_API_URL
      [[ "${PAYGATE_ADYEN_CHECKOUT_URL:-}" == "http://127.0.0.1:$port/checkout/v71" ]] &&
        unset PAYGATE_ADYEN_API_KEY PAYGATE_ADYEN_MERCHANT_ACCOUNT PAYGATE_ADYEN_CHECKOUT_URL
      return 0
    fi
    sleep 0.1
  done
  _dev_demo_url="$PAYGATE_STRIPE_API_URL" # run.sh's banner offers `bin/paygate demo`
  echo "dev: the demo's shop stands in for Stripe's API and Adyen's Checkout at $PAYGATE_STRIPE_API_URL (log: .tools/run/demo.log)" >&2
}

if [[ -z "${PAYGATE_SMTP_URL:-}" ]]; then
  _dev_start_mailpit
fi
if [[ -z "${PAYGATE_STRIPE_API_KEY:-}" ]]; then
  if [[ "${PAYGATE_DEV_STRIPE:-}" == stripe-mock ]]; then
    _dev_start_stripe_mock
  else
    _dev_start_demo_world
  fi
fi
:
