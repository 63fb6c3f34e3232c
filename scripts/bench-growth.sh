#!/usr/bin/env bash
# `make bench-growth`: does paygate stay as fast when its tables hold a year
# of traffic? On this shared machine two runs minutes apart differ more than
# an empty database and a full one do, so every filled level is measured
# against an empty database in alternation, in the same run:
#
#   1. recreates and migrates the database paygate_bench (on the server
#      scripts/db.sh finds, as scripts/bench.sh does);
#   2. for each level of GROWTH_LEVELS (events held) above 0, fills
#      paygate_bench to that many events with cmd/benchfill: paygate's own
#      rows for payments of make bench's mix, written by COPY, with their
#      ledger, payments, facts, history and emails; then VACUUM ANALYZE and
#      a CHECKPOINT; then builds the ledger's balance snapshot (`paygate
#      ledger snapshots`), as serve keeps it;
#   3. runs GROWTH_PAIRS pairs of make bench's ingest and end-to-end
#      measurement (scripts/bench.sh, one wrk level, no scale-out, no floor
#      server, pgbench anchors included): one on paygate_bench as it is
#      (BENCH_DATABASE_KEEP=1) and one on paygate_bench_empty, recreated for
#      each run, the order swapped from pair to pair;
#   4. after each run brings the ledger's balance snapshot up to a minute
#      ago (`paygate ledger snapshots`, what serve does every 10 minutes;
#      snapshots.txt), starts one `paygate serve` on that database
#      and times GET /v1/ops/stats, GET /metrics and GET
#      /v1/ledger/trial-balance?as_of= at three instants (now, the middle of
#      a day half a year back, the last instant of last month; as-of.txt)
#      (GROWTH_CALLS calls each, curl's time_total), and a few other reads
#      five times each (reads.txt);
#
# and prints one table: each level's mean ingest and end-to-end events/s, as
# a ratio to the mean of the empty runs it alternated with (level 0: all the
# empty runs), each pair's ratios, the /v1/ops/stats times, the database's
# size and what a run cost the server (blocks read from outside
# shared_buffers, WAL full-page images, checkpoints), with the targets (at
# the last level: rates no more than 10 % below the empty database's,
# /v1/ops/stats median under 50 ms, the slowest as_of median under 100
# ms).
#
# Knobs (environment):
#   GROWTH_LEVELS (0,100000)   events held at each level, ascending; the
#                              full run is GROWTH_LEVELS=0,1000000,10000000
#                              (10 M: about 33 GB, filled at 6,000 to 15,000
#                              events/s on two cores: 12 to 30 minutes)
#   GROWTH_PAIRS (3)           pairs at each level above 0; GROWTH_PAIRS=0
#                              measures each level once on paygate_bench,
#                              in turn, with ratios to the first level's
#                              (for two private clusters measured by hand)
#   GROWTH_KEEP=1              keeps paygate_bench as it is instead of
#                              recreating it (benchfill only adds events)
#   GROWTH_CONNECTIONS (64)    the wrk connection count (BENCH_LEVELS)
#   GROWTH_CALLS (50)          timed calls of each endpoint per run
#   GROWTH_TABLE=1             only prints the table again from the runs'
#                              saved results (nothing is filled or measured)
#   and scripts/bench.sh's own (BENCH_SECONDS, BENCH_WARMUP, BENCH_RATE…),
#   passed through.
# Installs Debian's jq when missing. Raw outputs (benchfill's log, each run's
# bench results and report, the timings, io.txt, table.txt) go to
# tmp/bench-growth/ (git-ignored): level-N/benchfill.log, level-N/<run>/
# for each run (full-1, empty-1, …; once for GROWTH_PAIRS=0 or level 0).
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
pairs=${GROWTH_PAIRS:-3}
conns=${GROWTH_CONNECTIONS:-64}
calls=${GROWTH_CALLS:-50}
secret=whsec_bench_paygate
token=bench-growth-ops-token
[[ "$pairs" =~ ^[0-9]+$ ]] || { say "GROWTH_PAIRS must be a whole number, got '$pairs'"; exit 2; }
for level in "${levels[@]}"; do
  [[ "$level" =~ ^[0-9]+$ ]] || { say "GROWTH_LEVELS must be whole numbers, got '$level'"; exit 2; }
done

db=paygate_bench
empty_db=paygate_bench_empty
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
trap 'stop_paygate; bench_db_drop "$admin" "$empty_db" 2>/dev/null || true' EXIT
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

# fill LEVEL: paygate_bench filled to LEVEL events.
fill() {
  local dir="$out/level-$1"
  mkdir -p "$dir"
  say "level $1: filling (log: tmp/bench-growth/level-$1/benchfill.log)"
  "$out/benchfill" -database-url "$url" -events "$1" 2>&1 | tee "$dir/benchfill.log" >&2
  # A database in service has its balance snapshot (serve refreshes it
  # every 10 minutes); a filled one has none until it is built, and serve
  # would build a year of cuts at its start, in the first run's
  # measurement.
  DATABASE_URL="$url" "$out/paygate" ledger snapshots 2>&1 | tee "$dir/snapshots.txt" >&2
}

# run LEVEL KIND N: one measurement, of paygate_bench as it is (KIND full)
# or of paygate_bench_empty made anew (KIND empty), into level-LEVEL/KIND-N/,
# whose row.txt holds: held ingest/s e2e/s pgbench1 ops-stats-median
# ops-stats-max metrics-median metrics-max size as-of-median as-of-max (the
# slowest instant's).
run() {
  local level="$1" kind="$2" n="$3" dir="$out/level-$1/$2-$3" rurl name keep
  local held size p lv ingest e2e pg1 stats_med stats_max metrics_med metrics_max
  rm -rf "$dir"
  mkdir -p "$dir"
  if [[ "$kind" == empty ]]; then name=$empty_db keep=""; else name=$db keep=1; fi
  rurl=$(DATABASE_URL='' scripts/db.sh "$name" 2>/dev/null)

  say "level $level, $kind run $n: make bench's measurement on $name (log: tmp/bench-growth/level-$level/$kind-$n/bench.log)"
  # The empty database is made anew inside bench.sh, its statistics from 0.
  local before after fresh=""
  [[ "$kind" == empty ]] && fresh=fresh
  before=$(io_counters "$rurl" "$fresh")
  # One pair of runs with and without an endpoint a run (make bench's
  # three would triple its length; the growth runs are pairs already).
  BENCH_DATABASE="$name" BENCH_DATABASE_KEEP="$keep" BENCH_LEVELS="$conns" BENCH_SCALEOUT=0 BENCH_FLOOR="${BENCH_FLOOR:-0}" \
    BENCH_ENDPOINT_PAIRS="${BENCH_ENDPOINT_PAIRS:-1}" \
    scripts/bench.sh >"$dir/bench.log" 2>&1 || { tail -30 "$dir/bench.log" >&2; say "level $level: bench failed"; exit 1; }
  after=$(io_counters "$rurl")
  awk -v a="$after" -v b="$before" 'BEGIN { n = split(a, x); split(b, y)
    for (i = 1; i <= n; i++) printf "%s%d", (i > 1 ? " " : ""), x[i] - y[i]; print "" }' >"$dir/io.txt"
  cp tmp/bench/results.json tmp/bench/report.txt "$dir/"
  cp tmp/bench/pgbench-single-before.log tmp/bench/pgbench-single-after.log "$dir/" 2>/dev/null || true
  sed -n '/^anchors/,/^targets/p' "$dir/report.txt" | sed '$d' >&2
  held=$("$psql" "$rurl" -tAc "SELECT coalesce(sum(n), 0) FROM inbox_status_counts")
  size=$("$psql" "$rurl" -tAc "SELECT pg_database_size(current_database())")
  # The balance snapshot as serve keeps it: the days the fill's and the
  # run's postings marked are made again, up to a minute ago.
  DATABASE_URL="$rurl" "$out/paygate" ledger snapshots >"$dir/snapshots.txt" 2>&1 ||
    { cat "$dir/snapshots.txt" >&2; say "level $level: ledger snapshots failed"; exit 1; }

  p=18180
  while ! port_free "$p"; do p=$((p + 1)); done
  DATABASE_URL="$rurl" PAYGATE_ADDR="127.0.0.1:$p" PAYGATE_STRIPE_WEBHOOK_SECRETS="$secret" \
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
  # The trial balance as of an instant: now (the entries since the
  # snapshot's newest cut, a minute before its refresh), the middle of a
  # day half a year back, the last instant of last month; the row keeps the
  # slowest median and maximum.
  local when m x asof_med=0 asof_max=0
  : >"$dir/as-of.txt"
  for when in "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(date -u -d '-183 days' +%Y-%m-%dT13:37:00Z)" \
    "$(date -u -d "$(date -u +%Y-%m-01) -1 second" +%Y-%m-%dT%H:%M:%SZ)"; do
    read -r m x < <(time_calls "http://127.0.0.1:$p/v1/ledger/trial-balance?as_of=$when" "$dir/as-of-ms.tmp")
    echo "$when $m $x" >>"$dir/as-of.txt"
    asof_med=$(awk -v a="$asof_med" -v b="$m" 'BEGIN { print (b > a ? b : a) }')
    asof_max=$(awk -v a="$asof_max" -v b="$x" 'BEGIN { print (b > a ? b : a) }')
  done
  rm -f "$dir/as-of-ms.tmp"
  # The other reads an operator makes, for what grows with the data (not
  # in the table): a filled event, payment and its ledger, the lists'
  # first pages, the trial balance.
  local ev pay path
  ev=$("$psql" "$rurl" -tAc "SELECT event_id FROM inbox_event_keys ORDER BY received_at LIMIT 1")
  pay=$("$psql" "$rurl" -tAc "SELECT id FROM payments ORDER BY created_at LIMIT 1")
  : >"$dir/reads.txt"
  for path in "/v1/events/stripe/$ev" "/v1/payments/$pay" "/v1/payments/$pay/ledger" "/v1/events?limit=100" \
    "/v1/events?status=processed&type=charge.succeeded&limit=100" "/v1/payments?limit=100" "/v1/ops/poison" "/v1/ledger/trial-balance"; do
    echo "$path $(calls=5 time_calls "http://127.0.0.1:$p$path" "$dir/read.tmp")" >>"$dir/reads.txt"
  done
  rm -f "$dir/read.tmp"
  stop_paygate

  lv=$(jq --argjson c "$conns" '.series[] | select(.label == "paygate") | .levels[] | select(.connections == $c)' "$dir/results.json")
  # As loadgen's report counts them: 2xx answers over wrk's duration, and
  # the events found in the inbox over the time until none was left
  # received.
  ingest=$(jq -r 'if .wrk.seconds > 0 then (.wrk.requests - .wrk.non_2xx) / .wrk.seconds else .wrk.requests_per_s end' <<<"$lv")
  e2e=$(jq -r 'if .e2e_seconds > 0 then (if .stored > 0 then .stored else .events end) / .e2e_seconds else 0 end' <<<"$lv")
  pg1=$(cat "$dir"/pgbench-single-*.log 2>/dev/null | sed -nE 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' |
    awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n; else print 0 }')
  echo "$held $ingest $e2e $pg1 $stats_med $stats_max $metrics_med $metrics_max $size $asof_med $asof_max" >"$dir/row.txt"
  say "level $level, $kind run $n: $held events held, ingest $(printf '%.0f' "$ingest")/s, end to end $(printf '%.0f' "$e2e")/s, pgbench single $pg1, ops/stats median ${stats_med} ms (max ${stats_max}), $(numfmt --to=iec "$size"); $(cat "$dir/snapshots.txt")"
  say "trial balance as of (instant, median and max of $calls, ms):"
  cat "$dir/as-of.txt" >&2
  say "other reads (path, median and max of 5, ms):"
  cat "$dir/reads.txt" >&2
}

# io_counters URL [fresh]: what a run costs the server, as cumulative
# counters: the measured database's blocks read from outside shared_buffers
# and found in them (pg_stat_database; zeros with "fresh", for a database
# about to be made anew), and the whole server's WAL full-page images, WAL
# bytes and checkpoints (pg_stat_wal, pg_stat_bgwriter; the run's pgbench
# anchors write to the same WAL).
io_counters() {
  local db_counters="blks_read, blks_hit"
  [[ "${2:-}" == fresh ]] && db_counters="0, 0"
  "$psql" "$1" -tAF' ' -c "SELECT $db_counters, w.wal_fpi, w.wal_bytes, b.checkpoints_timed + b.checkpoints_req
    FROM pg_stat_database d, pg_stat_wal w, pg_stat_bgwriter b WHERE d.datname = current_database()"
}

# ratio A B [PLACES]: A/B to two (or PLACES) decimals, 0 when B is 0.
ratio() { awk -v a="$1" -v b="$2" -v p="${3:-2}" 'BEGIN { printf "%.*f", p, (b > 0 ? a / b : 0) }'; }
verdict() { if awk "BEGIN { exit !($1) }"; then echo met; else echo "NOT met"; fi; }

# agg FILE…: the runs' rows as one: the most events held, mean ingest, e2e
# and pgbench1, the highest ops/stats, metrics and as_of medians and
# maxima, the largest size.
agg() {
  cat "$@" | awk '{ if ($1 > h) h = $1; i += $2; e += $3; g += $4; n++
      if ($5 > sm) sm = $5; if ($6 > sx) sx = $6; if ($7 > mm) mm = $7; if ($8 > mx) mx = $8; if ($9 > z) z = $9
      if ($10 > am) am = $10; if ($11 > ax) ax = $11 }
    END { printf "%d %.1f %.1f %.1f %.1f %.1f %.1f %.1f %d %.1f %.1f\n", h, i / n, e / n, g / n, sm, sx, mm, mx, z, am, ax }'
}

# pair_ratios LEVEL COLUMN: each pair's full/empty ratio of COLUMN (2 ingest, 3 e2e).
pair_ratios() {
  local n f e rs=()
  for n in $(seq "$pairs"); do
    f=$(awk -v c="$2" '{ print $c }' "$out/level-$1/full-$n/row.txt")
    e=$(awk -v c="$2" '{ print $c }' "$out/level-$1/empty-$n/row.txt")
    rs+=("$(ratio "$f" "$e")")
  done
  echo "${rs[*]}"
}

# io_mean LEVEL KIND COLUMN [iec]: the mean of one io.txt column over the
# level's runs of KIND (1 blocks read, 2 hit, 3 full-page images, 4 WAL
# bytes, 5 checkpoints); "?" for runs saved without it.
io_mean() {
  local files=("$out/level-$1/$2"-*/io.txt) m
  [[ -f "${files[0]}" ]] || { echo "?"; return; }
  m=$(cat "${files[@]}" | awk -v c="$3" '{ s += $c; n++ } END { printf "%.0f", s / n }')
  if [[ "${4:-}" == iec ]]; then numfmt --to=iec "$m"; else echo "$m"; fi
}

# table: the runs' saved rows as one table. With pairs, each level's mean
# over its full runs against the mean of the empty runs it alternated with
# (level 0: all the empty runs); without, each level against the first, in
# turn. The ÷pg1 columns divide each mean first by its runs' pgbench single
# (which moves with whatever else the machine runs).
table() {
  local level row base held ingest e2e pg1 smed smax mmed mmax size amed amax bi be bp vs last=()
  echo "paygate make bench-growth, $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), wrk at $conns connections, $pairs pairs a level"
  echo "machine: nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg), PostgreSQL $("$psql" "$url" -tAc "SHOW server_version")"
  echo
  if ((pairs > 0)); then vs="vs empty"; else vs="vs ${levels[0]}"; fi
  printf '%-9s %-9s %9s %8s %6s %8s %8s %6s %8s %19s %19s %19s %6s\n' level held "ingest/s" "$vs" "÷pg1" "e2e/s" "$vs" "÷pg1" "pgbench1" "ops/stats ms" "metrics ms" "as_of ms" size
  ((pairs > 0)) || base=$(cat "$out/level-${levels[0]}/full-1/row.txt")
  for level in "${levels[@]}"; do
    if ((pairs == 0)); then
      row=$(cat "$out/level-$level/full-1/row.txt")
    elif ((level == 0)); then
      row=$(agg "$out"/level-*/empty-*/row.txt)
      base=$row
    else
      row=$(agg "$out/level-$level"/full-*/row.txt)
      base=$(agg "$out/level-$level"/empty-*/row.txt)
    fi
    read -r held ingest e2e pg1 smed smax mmed mmax size amed amax <<<"$row"
    read -r _ bi be bp _ <<<"$base"
    printf '%-9s %-9s %9.0f %8s %6s %8.0f %8s %6s %8.0f %19s %19s %19s %6s\n' "$level" "$held" \
      "$ingest" "$(ratio "$ingest" "$bi")" "$(ratio "$(ratio "$ingest" "$pg1" 6)" "$(ratio "$bi" "$bp" 6)")" \
      "$e2e" "$(ratio "$e2e" "$be")" "$(ratio "$(ratio "$e2e" "$pg1" 6)" "$(ratio "$be" "$bp" 6)")" \
      "$pg1" "$smed (max $smax)" "$mmed (max $mmax)" "${amed:-?} (max ${amax:-?})" "$(numfmt --to=iec "$size")"
    last=("$level" "$ingest" "$e2e" "$smed" "$bi" "$be" "${amed:-0}")
  done
  if ((pairs > 0)); then
    echo "(vs empty: the level's mean over the mean of the empty runs it alternated with, $pairs pairs; level 0:"
    echo " the mean of every empty run; ÷pg1: the same, each mean first divided by its runs' one-event pgbench"
    echo " tps, pgbench1; ops/stats, metrics and as_of (the slowest of its three instants): the highest median"
    echo " and maximum of the runs' $calls calls, ms)"
    for level in "${levels[@]}"; do
      ((level > 0)) || continue
      echo "level $level, each pair full/empty: ingest $(pair_ratios "$level" 2); end to end $(pair_ratios "$level" 3)"
      echo "level $level, a run's mean cost, full/empty: blocks read outside shared_buffers $(io_mean "$level" full 1)/$(io_mean "$level" empty 1);" \
        "server WAL full-page images $(io_mean "$level" full 3)/$(io_mean "$level" empty 3), WAL $(io_mean "$level" full 4 iec)/$(io_mean "$level" empty 4 iec), checkpoints $(io_mean "$level" full 5)/$(io_mean "$level" empty 5)"
    done
    vs="the empty database's"
  else
    echo "(vs: the rate over the first level's; ÷pg1: the same, each rate first divided by its run's one-event"
    echo " pgbench tps, pgbench1; ops/stats, metrics and as_of (the slowest of its three instants): median and"
    echo " max of $calls calls, ms)"
    vs="level ${levels[0]}'s"
  fi
  echo
  read -r level ingest e2e smed bi be amed <<<"${last[*]}"
  echo "at $level events: ingest ≥ 0.90× $vs: $(verdict "$ingest >= 0.9 * $bi")"
  echo "at $level events: end to end ≥ 0.90× $vs: $(verdict "$e2e >= 0.9 * $be")"
  echo "at $level events: /v1/ops/stats median < 50 ms: $(verdict "$smed < 50")"
  echo "at $level events: /v1/ledger/trial-balance?as_of= median < 100 ms: $(verdict "$amed < 100")"
}

if [[ "${GROWTH_TABLE:-}" != 1 ]]; then
  rm -rf "$out"/level-*
  empties=0
  for level in "${levels[@]}"; do
    if ((pairs == 0)); then
      fill "$level"
      run "$level" full 1
      continue
    fi
    ((level > 0)) || continue
    fill "$level"
    for n in $(seq "$pairs"); do
      if ((n % 2)); then run "$level" full "$n"; run "$level" empty "$n"
      else run "$level" empty "$n"; run "$level" full "$n"; fi
      empties=$((empties + 1))
    done
  done
  # Only level 0 asked for: the empty database once.
  if ((pairs > 0 && empties == 0)); then run 0 empty 1; fi
fi
table | tee "$out/table.txt"
