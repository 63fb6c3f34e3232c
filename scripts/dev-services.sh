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
# and PAYGATE_OPS_EMAIL when they are unset.

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

if [[ -z "${PAYGATE_SMTP_URL:-}" ]]; then
  _dev_start_mailpit
fi
:
