#!/usr/bin/env bash
# `make bench-growth`: does paygate stay as fast when its tables hold a year
# of traffic? For each level of GROWTH_LEVELS (events held):
#
#   1. fills the database paygate_bench (on the server scripts/db.sh finds,
#      recreated and migrated at the start, as scripts/bench.sh does) to
#      that many events with cmd/benchfill: paygate's own rows for payments
#      of make bench's mix, written by COPY, with their ledger, payments,
#      facts, history and emails; then VACUUM ANALYZE and a CHECKPOINT;
#   2. runs make bench's ingest and end-to-end measurement on the database
#      as it is (scripts/bench.sh with BENCH_DATABASE_KEEP=1, one wrk level,
#      no scale-out, no floor server), pgbench anchors included;
#   3. starts one `paygate serve` on it and times GET /v1/ops/stats and
#      GET /metrics (GROWTH_CALLS calls each, curl's time_total), and a few
#      other reads five times each (level-*/reads.txt);
#
# and prints one table: each level's ingest and end-to-end events/s, as a
# ratio to the first level's, the /v1/ops/stats times and the database's
# size, with the targets (at the last level: rates no more than 10 % below
# the first level's, /v1/ops/stats median under 50 ms).
#
# Knobs (environment):
#   GROWTH_LEVELS (0,100000)   events held at each level, ascending; the
#                              full run is GROWTH_LEVELS=0,1000000,10000000
#                              (10 M: about 35 GB, filled at about 6,000
#                              events/s on two cores: 30 minutes)
#   GROWTH_KEEP=1              keeps paygate_bench as it is instead of
#                              recreating it (benchfill only adds events)
#   GROWTH_CONNECTIONS (64)    the wrk connection count (BENCH_LEVELS)
#   GROWTH_CALLS (50)          timed calls of each endpoint per level
#   GROWTH_TABLE=1             only prints the table again from the levels'
#                              saved results (nothing is filled or measured)
#   and scripts/bench.sh's own (BENCH_SECONDS, BENCH_WARMUP, BENCH_RATE…),
#   passed through.
# Installs Debian's jq when missing. Raw outputs (benchfill's log, each level's bench results and
# report, the timings, table.txt) go to tmp/bench-growth/ (git-ignored).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/tmp/bench-growth"
mkdir -p "$out"
say() { echo "bench-growth: $*" >&2; }

# jq reads the measurements bench.sh saves; Debian's, when missing.
command -v jq >/dev/null || scripts/apt-install.sh jq=1.6-2.1+deb12u3
# shellcheck source=scripts/pg-bin.sh
source "$(dirname "${BASH_SOURCE[0]}")/pg-bin.sh"
# shellcheck source=scripts/bench-db.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench-db.sh"
psql=$(find_pg_bin psql) || { say "psql not found"; exit 1; }

IFS=, read -r -a levels <<<"${GROWTH_LEVELS:-0,100000}"
conns=${GROWTH_CONNECTIONS:-64}
calls=${GROWTH_CALLS:-50}
secret=whsec_bench_paygate
token=bench-growth-ops-token

db=paygate_bench
url=$(DATABASE_URL='' scripts/db.sh "$db")
admin=$(bench_admin_url "$url" "$db")
if [[ "${GROWTH_TABLE:-}" != 1 ]]; then
  say "building"
  go build -o "$out/paygate" ./cmd/paygate
  go build -o "$out/benchfill" ./cmd/benchfill
  if [[ "${GROWTH_KEEP:-}" == 1 ]]; then
    say "using database $db as it is (GROWTH_KEEP=1)"
  else
    say "recreating database $db"
    url=$(bench_db_recreate "$admin" "$db")
  fi
  DATABASE_URL="$url" "$out/paygate" migrate >"$out/migrate.log" 2>&1
fi

pid=""
stop_paygate() {
  [[ -n "$pid" ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}
trap stop_paygate EXIT
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# time_calls URL FILE: GROWTH_CALLS timed GETs, one time_total in ms a line;
# prints "median max".
time_calls() {
  local i t
  : >"$2"
  for i in $(seq "$calls"); do
    t=$(curl -fsS -o /dev/null -H "Authorization: Bearer $token" -w '%{time_total}' "$1")
    awk -v t="$t" 'BEGIN { printf "%.2f\n", t * 1000 }' >>"$2"
  done
  sort -n "$2" | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f %.1f\n", m, v[NR] }'
}

measure() {
  local level="$1" dir="$out/level-$1" held size p lv ingest e2e pg1 stats_med stats_max metrics_med metrics_max
  rm -rf "$dir"
  mkdir -p "$dir"
  say "level $level: filling (log: tmp/bench-growth/level-$level/benchfill.log)"
  "$out/benchfill" -database-url "$url" -events "$level" 2>&1 | tee "$dir/benchfill.log" >&2
  held=$("$psql" "$url" -tAc "SELECT coalesce(sum(n), 0) FROM inbox_status_counts")
  size=$("$psql" "$url" -tAc "SELECT pg_database_size(current_database())")

  say "level $level: make bench's measurement on $held events (log: tmp/bench-growth/level-$level/bench.log)"
  BENCH_DATABASE_KEEP=1 BENCH_LEVELS="$conns" BENCH_SCALEOUT=0 BENCH_FLOOR="${BENCH_FLOOR:-0}" \
    scripts/bench.sh >"$dir/bench.log" 2>&1 || { tail -30 "$dir/bench.log" >&2; say "level $level: bench failed"; exit 1; }
  cp tmp/bench/results.json tmp/bench/report.txt "$dir/"
  cp tmp/bench/pgbench-single-before.log tmp/bench/pgbench-single-after.log "$dir/" 2>/dev/null || true
  cat "$dir/report.txt" >&2

  p=18180
  while ! port_free "$p"; do p=$((p + 1)); done
  DATABASE_URL="$url" PAYGATE_ADDR="127.0.0.1:$p" PAYGATE_STRIPE_WEBHOOK_SECRETS="$secret" \
    PAYGATE_OPS_TOKENS="$token" "$out/paygate" serve >"$dir/paygate.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    curl -fsS "http://127.0.0.1:$p/readyz" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { tail -20 "$dir/paygate.log" >&2; exit 1; }
    sleep 0.1
  done
  curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:$p/v1/ops/stats" >"$dir/stats.json"
  read -r stats_med stats_max < <(time_calls "http://127.0.0.1:$p/v1/ops/stats" "$dir/ops-stats-ms.txt")
  read -r metrics_med metrics_max < <(time_calls "http://127.0.0.1:$p/metrics" "$dir/metrics-ms.txt")
  # The other reads an operator makes, for what grows with the data (not
  # in the table): a filled event, payment and its ledger, the lists'
  # first pages, the trial balance.
  local ev pay path
  ev=$("$psql" "$url" -tAc "SELECT event_id FROM inbox_event_keys ORDER BY received_at LIMIT 1")
  pay=$("$psql" "$url" -tAc "SELECT id FROM payments ORDER BY created_at LIMIT 1")
  : >"$dir/reads.txt"
  for path in "/v1/events/stripe/$ev" "/v1/payments/$pay" "/v1/payments/$pay/ledger" "/v1/events?limit=100" \
    "/v1/events?status=processed&type=charge.succeeded&limit=100" "/v1/payments?limit=100" "/v1/ops/poison" "/v1/ledger/trial-balance"; do
    echo "$path $(calls=5 time_calls "http://127.0.0.1:$p$path" "$dir/read.tmp")" >>"$dir/reads.txt"
  done
  rm -f "$dir/read.tmp"
  say "level $level: other reads (path, median and max of 5, ms):"
  cat "$dir/reads.txt" >&2
  stop_paygate

  lv=$(jq --argjson c "$conns" '.series[] | select(.label == "paygate") | .levels[] | select(.connections == $c)' "$dir/results.json")
  # As loadgen's report counts them: 2xx answers over wrk's duration, and
  # the events found in the inbox over the time until none was left
  # received.
  ingest=$(jq -r 'if .wrk.seconds > 0 then (.wrk.requests - .wrk.non_2xx) / .wrk.seconds else .wrk.requests_per_s end' <<<"$lv")
  e2e=$(jq -r 'if .e2e_seconds > 0 then (if .stored > 0 then .stored else .events end) / .e2e_seconds else 0 end' <<<"$lv")
  pg1=$(cat "$dir"/pgbench-single-*.log 2>/dev/null | sed -nE 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' |
    awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n; else print 0 }')
  echo "$level $held $ingest $e2e $pg1 $stats_med $stats_max $metrics_med $metrics_max $size" >"$dir/row.txt"
  say "level $level: ingest $ingest/s, end to end $e2e/s, ops/stats median ${stats_med} ms (max ${stats_max}), $(numfmt --to=iec "$size")"
}

# ratio A B [PLACES]: A/B to two (or PLACES) decimals, 0 when B is 0.
ratio() { awk -v a="$1" -v b="$2" -v p="${3:-2}" 'BEGIN { printf "%.*f", p, (b > 0 ? a / b : 0) }'; }
verdict() { if awk "BEGIN { exit !($1) }"; then echo met; else echo "NOT met"; fi; }

# table: the levels' saved rows (level-*/row.txt) as one table. The ratios
# are to the first level's rates, as measured and divided by each run's
# own pgbench anchor (which moves with whatever else the machine runs).
table() {
  local rows=() level held ingest e2e pg1 smed smax mmed mmax size
  local base_ingest base_e2e base_pg1
  for level in "${levels[@]}"; do rows+=("$(cat "$out/level-$level/row.txt")"); done
  echo "paygate make bench-growth, $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), wrk at $conns connections"
  echo "machine: nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg), PostgreSQL $("$psql" "$url" -tAc "SHOW server_version")"
  echo
  read -r _ _ base_ingest base_e2e base_pg1 _ <<<"${rows[0]}"
  printf '%-9s %-9s %9s %6s %6s %8s %6s %6s %7s %19s %19s %6s\n' level held "ingest/s" "vs ${levels[0]}" "÷pg1" "e2e/s" "vs ${levels[0]}" "÷pg1" "pgbench1" "ops/stats ms" "metrics ms" size
  for r in "${rows[@]}"; do
    read -r level held ingest e2e pg1 smed smax mmed mmax size <<<"$r"
    printf '%-9s %-9s %9.0f %6s %6s %8.0f %6s %6s %7.0f %19s %19s %6s\n' "$level" "$held" \
      "$ingest" "$(ratio "$ingest" "$base_ingest")" "$(ratio "$(ratio "$ingest" "$pg1" 6)" "$(ratio "$base_ingest" "$base_pg1" 6)")" \
      "$e2e" "$(ratio "$e2e" "$base_e2e")" "$(ratio "$(ratio "$e2e" "$pg1" 6)" "$(ratio "$base_e2e" "$base_pg1" 6)")" \
      "$pg1" "$smed (max $smax)" "$mmed (max $mmax)" "$(numfmt --to=iec "$size")"
  done
  echo "(vs: the rate over the first level's; ÷pg1: the same, each rate first divided by its run's one-event"
  echo " pgbench tps, pgbench1; ops/stats and metrics: median and max of $calls calls, ms)"
  echo
  read -r level _ ingest e2e _ smed _ <<<"${rows[-1]}"
  echo "at $level events: ingest ≥ 0.90× level ${levels[0]}: $(verdict "$ingest >= 0.9 * $base_ingest")"
  echo "at $level events: end to end ≥ 0.90× level ${levels[0]}: $(verdict "$e2e >= 0.9 * $base_e2e")"
  echo "at $level events: /v1/ops/stats median < 50 ms: $(verdict "$smed < 50")"
}

if [[ "${GROWTH_TABLE:-}" != 1 ]]; then
  for level in "${levels[@]}"; do measure "$level"; done
fi
table | tee "$out/table.txt"
