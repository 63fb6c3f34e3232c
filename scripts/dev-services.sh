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
# and PAYGATE_OPS_EMAIL when they are unset; then stripe-mock (below).

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

# stripe-mock, unless PAYGATE_STRIPE_API_KEY is already set: Stripe's own
# API stand-in (pinned by scripts/tools.sh), so that refunds started from
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

if [[ -z "${PAYGATE_SMTP_URL:-}" ]]; then
  _dev_start_mailpit
fi
if [[ -z "${PAYGATE_STRIPE_API_KEY:-}" ]]; then
  _dev_start_stripe_mock
fi
:
