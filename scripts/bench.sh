#!/usr/bin/env bash
# `make bench`: paygate's ingest and end-to-end throughput, sent by wrk,
# against the machine's own limits measured in the same run (see
# docs/performance.md).
#
#   1. installs wrk (scripts/wrk.sh) and builds paygate and cmd/loadgen into
#      tmp/bench/ (bin/ is left alone);
#   2. drops, recreates and migrates the database paygate_bench on the server
#      scripts/db.sh finds (never $DATABASE_URL's database), unless
#      BENCH_DATABASE_KEEP=1; and paygate_bench_pgbench (the database's
#      name then _pgbench), migrated the same
#      way, for the pgbench anchors (dropped at the end);
#   3. anchors: pgbench of the one-event transaction on paygate's and
#      River's tables (scripts/bench_naive_ingest.sql), of the bare
#      one-event transaction, two rows on tables of its own
#      (scripts/bench_bare_ingest.sql) and of its statements sent in one
#      round trip (pgbench's pipeline), of the same rows 32 to a
#      transaction (scripts/bench_batch_ingest.sql), and the floor server
#      (`loadgen floor`, no database) under wrk at each connection count;
#      every pgbench client connects with paygate's URL and prepared
#      statements, as paygate does;
#   4. one `paygate serve`, wrk straight to it at each connection count
#      (`loadgen run`: distinct pre-signed events, until every one is
#      acknowledged, then until none is left `received`), then paced at
#      1,000 events/s for latency;
#   4b. the peers (`loadgen peer`): the gateway a team would write instead
#      (net/http, stripe-go's signature check, a pool of 32 with prepared
#      statements, one transaction per webhook), -mode store (the event and
#      a job row) then -mode sync (the event applied: payment and capture's
#      ledger transaction), each on a fresh schema `peer` of the database,
#      warmed up and run as in step 4 at its levels: paygate's ingest
#      against the store peer's, its end to end against the sync peer's;
#      with BENCH_LIMITS=1 then each grouped (-group: the least work),
#      -mode contract -group (the least work with paygate's rows) and -mode
#      inbox -group (with paygate's ingest rows), each on the anchor's
#      database migrated afresh;
#   5. one `paygate serve` with one endpoint attached (`loadgen receive`, a
#      local receiver answering 200 at once), warmed up and analyzed as in
#      step 4 (with the endpoint's deliveries in it), at 64 connections:
#      ingest and end-to-end against step 4's, and the messages delivered
#      per second; with BENCH_LIMITS=1 then the contract peer in as many
#      pairs, with the same receiver attached (-endpoint) and without: the
#      limit for that ratio;
#   5b. one `paygate serve` publishing to NATS JetStream (PAYGATE_NATS_URL: a
#      `nats-server -js` of its own, Debian's, installed by
#      scripts/nats-server.sh when missing, storing under tmp/bench/nats),
#      warmed up as in step 4 (the publisher first publishes every message
#      the earlier runs wrote, which the new stream has not seen) and
#      analyzed, at 64 connections: ingest and end-to-end against step 4's,
#      and the messages published per second;
#   5c. with BENCH_SWEEP=1: pairs of runs at 64 connections, each on a
#      `paygate serve` of its own, one started with Stripe's missed-event
#      sweep every 10 s (PAYGATE_STRIPE_SWEEP_EVERY=10s) against the Stripe
#      API `loadgen run -stripe-api` serves, which lists the very events
#      the run sends, one without: ingest and end-to-end with against
#      without, and what the sweep listed;
#   5d. with BENCH_TRACING=1: the same pairs, one run on a paygate tracing
#      every span (OTEL_TRACES_SAMPLER=always_on) to `loadgen receive` over
#      OTLP/HTTP, one without: the ratios, and the spans per event;
#   6. scale-out: 1, 2 and 4 instances on the same database behind
#      `loadgen proxy`, at 64 and 256 connections;
#   7. the one-event pgbench runs again (the ratios use the mean of each), and
#      the table (tmp/bench/report.txt).
#
# Knobs (environment):
#   BENCH_LEVELS (16,64,256)      wrk connection counts
#   BENCH_SECONDS (10)            about how long each level sends
#   BENCH_EXPECT (16=2100,64=4000,256=6200)  expected events/s, to size levels
#   BENCH_RATE (1000), BENCH_RATE_SECONDS (10), BENCH_RATE_CONNECTIONS (64)
#                                 the paced latency run (BENCH_RATE=0 skips it)
#   BENCH_WARMUP (5000)           events applied, then ANALYZE, before measuring
#   BENCH_PGBENCH_SECONDS (10)    each pgbench run
#   BENCH_FLOOR=0                 skips the floor server
#   BENCH_LIMITS=1                also measures the least work (loadgen peer
#                                 -group, each peer grouped): how far beyond the
#                                 peers any gateway gets on this machine; and
#                                 the least work with paygate's rows (loadgen
#                                 peer -mode contract -group, in a database
#                                 paygate migrated): how far paygate's end to
#                                 end could get, alone and in pairs with and
#                                 without an endpoint; and with paygate's
#                                 ingest rows (-mode inbox -group): how far
#                                 its ingest could
#   BENCH_PEERS=0                 skips the peers (the gateway a team would
#                                 write instead)
#   BENCH_ENDPOINT=0              skips the runs with and without an endpoint
#                                 attached; BENCH_ENDPOINT_PAIRS (3) pairs of
#                                 them, BENCH_ENDPOINT_LEVELS (64)
#   BENCH_NATS=0                  skips the run publishing to NATS;
#                                 BENCH_NATS_LEVELS (64)
#   BENCH_SWEEP=1                 the pairs with and without the Stripe
#                                 sweep (off by default); BENCH_SWEEP_PAIRS (3)
#   BENCH_TRACING=1               the pairs with and without tracing (off
#                                 by default); BENCH_TRACING_PAIRS (3)
#   BENCH_SCALEOUT=0              skips scale-out; BENCH_SCALEOUT_INSTANCES
#                                 (1 2 4), BENCH_SCALEOUT_LEVELS (64,256),
#                                 BENCH_SCALEOUT_SECONDS (6)
#   BENCH_DATABASE_KEEP=1         uses the database as it is: no drop, no
#                                 truncate (a filled database, for growth runs)
#   BENCH_DATABASE (paygate_bench)  the database measured (make bench-growth
#                                 alternates a filled one and an empty one)
#   BENCH_PROFILE=1               CPU profile of paygate at the highest level
#                                 (tmp/bench/cpu.pprof; with an endpoint
#                                 attached, tmp/bench/cpu-endpoint.pprof)
#   BENCH_INGEST=tx               paygate built with one transaction per event
#   BENCH_PAYGATE=path            measures that paygate binary (an earlier
#                                 commit's build) with this tree's loadgen and
#                                 events: a before/after pair on the same load
#   BENCH_PGSS=1                  runs on the private cluster (scripts/db.sh,
#                                 PAYGATE_PRIVATE_PG=1) with pg_stat_statements
#                                 loaded (track = all): each measured level
#                                 adds PostgreSQL's own view of its statements
#                                 per event applied, loadgen's left out
# Raw outputs (wrk's, pgbench's, the servers' logs, results.json) go to
# tmp/bench/ (git-ignored).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/tmp/bench"
mkdir -p "$out"
rm -f "$out"/wrk-*.txt "$out"/pgbench-*.log "$out"/results.json "$out"/report.txt
say() { echo "bench: $*" >&2; }
if [[ "${BENCH_PGSS:-}" == 1 ]]; then
  export PAYGATE_PRIVATE_PG=1
  export PAYGATE_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
fi

# shellcheck source=scripts/pg-bin.sh
source "$(dirname "${BASH_SOURCE[0]}")/pg-bin.sh"
# shellcheck source=scripts/bench-db.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench-db.sh"
pgbench=$(find_pg_bin pgbench) || { say "pgbench not found (Debian: apt-get install postgresql-client)"; exit 1; }
psql=$(find_pg_bin psql) || { say "psql not found"; exit 1; }
wrkver=$(scripts/wrk.sh)
say "wrk $wrkver"

levels=${BENCH_LEVELS:-16,64,256}
seconds=${BENCH_SECONDS:-10}
expect=${BENCH_EXPECT:-16=2100,64=4000,256=6200}
pgsecs=${BENCH_PGBENCH_SECONDS:-10}
secret=whsec_bench_paygate
token=bench-ops-token

say "building"
ldflags=""
[[ "${BENCH_INGEST:-batch}" == tx ]] && ldflags="-X main.ingestMode=tx"
if [[ -n "${BENCH_PAYGATE:-}" ]]; then
  # An earlier build measured with this tree's load: the same events sent
  # to both, so that a before/after pair differs only in paygate.
  cp "$BENCH_PAYGATE" "$out/paygate"
else
  go build -ldflags "$ldflags" -o "$out/paygate" ./cmd/paygate
fi
go build -o "$out/loadgen" ./cmd/loadgen

db=${BENCH_DATABASE:-paygate_bench}
anchor=${db}_pgbench
url=$(DATABASE_URL='' scripts/db.sh "$db")
admin=$(bench_admin_url "$url" "$db")
if [[ "${BENCH_DATABASE_KEEP:-}" == 1 ]]; then
  say "using database $db as it is (BENCH_DATABASE_KEEP=1)"
else
  say "recreating database $db"
  url=$(bench_db_recreate "$admin" "$db")
fi
DATABASE_URL="$url" "$out/paygate" migrate >"$out/migrate.log" 2>&1
if [[ "${BENCH_PGSS:-}" == 1 ]]; then
  "$psql" "$url" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
fi
# transport URL: how a libpq client reaches PostgreSQL through URL, TLS or
# not; the anchors and paygate must reach it alike.
transport() {
  "$psql" "$1" -tAc "SELECT CASE WHEN ssl THEN 'TLS (' || version || ')' ELSE 'no TLS' END
    FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
}
paygate_transport=$(transport "$url")
# fresh_anchor: the pgbench database, recreated and migrated as paygate's
# before each pgbench run, so that each run starts alike whatever the
# previous one wrote.
fresh_anchor() {
  anchor_url=$(bench_db_recreate "$admin" "$anchor")
  DATABASE_URL="$anchor_url" "$out/paygate" migrate >"$out/migrate-pgbench.log" 2>&1
  "$psql" "$anchor_url" -q -v ON_ERROR_STOP=1 -f scripts/bench_bare_schema.sql >/dev/null
  "$psql" "$anchor_url" -qc "CHECKPOINT" >/dev/null
  local anchor_transport
  anchor_transport=$(transport "$anchor_url")
  [[ "$anchor_transport" == "$paygate_transport" ]] ||
    { say "the anchors would reach PostgreSQL with $anchor_transport, paygate with $paygate_transport"; return 1; }
}

pids=()
stop_all() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  stop_all
  bench_db_drop "$admin" "$anchor" 2>/dev/null || true
}
trap cleanup EXIT

pgver=$("$psql" "$url" -tAc "SHOW server_version")
fsync=$("$psql" "$url" -tAc "SHOW fsync")
synccommit=$("$psql" "$url" -tAc "SHOW synchronous_commit")
maxconns=$("$psql" "$url" -tAc "SHOW max_connections")
# The statistics' live-row estimate, over the partitions if there are
# any: a count(*) of a filled inbox would take minutes.
stored=$("$psql" "$url" -tAc "SELECT coalesce(sum(n_live_tup), 0) FROM pg_stat_user_tables
  WHERE relid = 'inbox_events'::regclass OR relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'inbox_events'::regclass)")
mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
title="paygate make bench, $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), ingest=${BENCH_INGEST:-batch}
machine: nproc $(nproc), MemTotal $mem, load average $(cut -d' ' -f1-3 /proc/loadavg), PostgreSQL $pgver (fsync=$fsync, synchronous_commit=$synccommit, max_connections=$maxconns; paygate and the anchors with $paygate_transport), wrk $wrkver, inbox rows at start ~$stored"

# pgbench_run NAME SCRIPT [pgbench args…]: prints the tps of one pgbench
# run on a fresh anchor database.
anchor_url=""
pgbench_run() {
  local name="$1" script="$2" tps
  shift 2
  fresh_anchor || return 1
  # The anchor's URL, as paygate's, so that both reach PostgreSQL the same
  # way: named by host and port alone, libpq would prefer TLS where the
  # server offers it, and every anchor would pay for encryption that
  # paygate's sslmode=disable does not. Prepared statements, as paygate's
  # (pgx's statement cache): pgbench's default parses and plans every
  # statement every time, work paygate does not do.
  "$pgbench" -n -M prepared -c 32 -j 2 -T "$pgsecs" "$@" \
    -f "$script" "$anchor_url" >"$out/pgbench-$name.log" 2>&1 || { cat "$out/pgbench-$name.log" >&2; return 1; }
  tps=$(sed -nE 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' "$out/pgbench-$name.log")
  [[ -n "$tps" ]] || { cat "$out/pgbench-$name.log" >&2; say "could not read pgbench's tps"; return 1; }
  grep -q '^number of failed transactions: 0 ' "$out/pgbench-$name.log" || { cat "$out/pgbench-$name.log" >&2; say "pgbench $name: failed transactions"; return 1; }
  say "pgbench $name: $tps tps"
  echo "$tps"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
next_port=18080
free_port() {
  while ! port_free "$next_port"; do next_port=$((next_port + 1)); done
  echo "$next_port"
  next_port=$((next_port + 1))
}
wait_ready() { # URL PID LOG
  local _
  for _ in $(seq 200); do
    curl -fsS "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { tail -20 "$3" >&2; return 1; }
    sleep 0.1
  done
  say "$1 not ready after 20 s"; tail -20 "$3" >&2; return 1
}
# start_paygate NAME [POOL [VAR=value…]]: starts one `paygate serve` (with a
# pool of POOL connections, pool_max_conns in its URL, when not empty; with
# the VAR=value settings besides the bench's, this instance only); sets
# started_pid and started_base.
start_paygate() {
  local p log="$out/paygate-$1.log" dburl="$url"
  [[ -n "${2:-}" ]] && dburl="$url&pool_max_conns=$2"
  shift $(( $# < 2 ? $# : 2 ))
  p=$(free_port)
  env DATABASE_URL="$dburl" PAYGATE_ADDR="127.0.0.1:$p" PAYGATE_STRIPE_WEBHOOK_SECRETS="$secret" \
    PAYGATE_OPS_TOKENS="$token" PAYGATE_DELIVERY_ALLOW_PRIVATE=true "$@" "$out/paygate" serve >"$log" 2>&1 &
  started_pid=$!
  pids+=("$started_pid")
  started_base="http://127.0.0.1:$p"
  wait_ready "$started_base/readyz" "$started_pid" "$log"
}
# start_receiver LOG: starts a `loadgen receive` (an endpoint answering 200
# at once, and an OTLP/HTTP trace receiver); sets receiver_pid and
# receiver_base.
start_receiver() {
  local p
  p=$(free_port)
  "$out/loadgen" receive -addr "127.0.0.1:$p" >"$out/$1" 2>&1 &
  receiver_pid=$!
  pids+=("$receiver_pid")
  receiver_base="http://127.0.0.1:$p"
  wait_ready "$receiver_base/healthz" "$receiver_pid" "$out/$1"
}
# stop_started: stops the instance start_paygate started last.
stop_started() {
  local p rest=()
  kill -TERM "$started_pid" 2>/dev/null || true
  wait "$started_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do [[ "$p" == "$started_pid" ]] || rest+=("$p"); done
  pids=("${rest[@]}")
}
# alternate_pairs N WITH WITHOUT: N pairs of runs, `WITH k` and
# `WITHOUT k` one after the other, the first of each pair alternating: the
# machine's load moves one run's rate by more than a feature costs, so
# each run with it is set against its own partner, and the report takes
# the median over the pairs.
alternate_pairs() {
  local k
  for k in $(seq "$1"); do
    if (( k % 2 == 1 )); then
      "$2" "$k"; "$3" "$k"
    else
      "$3" "$k"; "$2" "$k"
    fi
  done
}
# own_instance_run KIND PAIR with|without [VAR=value…] -- [FLAG…]: one run
# of a KIND pair (loadgen run -pair-of) at BENCH_ENDPOINT_LEVELS, on a
# paygate of its own started with the VAR=value settings and stopped
# after it, with loadgen's FLAGs besides; each run warms its instance up.
own_instance_run() {
  local kind=$1 pair=$2 side=$3 settings=() with=()
  shift 3
  while [[ "$1" != -- ]]; do settings+=("$1"); shift; done
  shift
  [[ "$side" == with ]] && with=(-with)
  start_paygate "$kind-$side-$pair" "" "${settings[@]}"
  run_loadgen -label "paygate-$kind-$side-$pair" -pair "$pair" -pair-of "$kind" "${with[@]}" -budget \
    -url "$started_base/webhooks/stripe" -levels "${BENCH_ENDPOINT_LEVELS:-64}" -pids "$started_pid" \
    -warmup "${BENCH_WARMUP:-5000}" -rate 0 "$@"
  stop_started
}
run_loadgen() { "$out/loadgen" run -secret "$secret" -database-url "$url" -out "$out" -save "$out/results.json" \
  -script scripts/bench.lua -seconds "$seconds" -expect "$expect" "$@"; }

# The bare transaction's statements in one round trip (pgbench's pipeline):
# what a client that never waits between a transaction's statements could
# reach. Made from the bare script, so that both hold the same statements.
bare_one_trip="$out/bench_bare_ingest_one_trip.sql"
{ echo '\startpipeline'; grep -v '^--' scripts/bench_bare_ingest.sql; echo '\endpipeline'; } >"$bare_one_trip"

say "pgbench anchors: 32 clients, ${pgsecs}s each, on $anchor"
single_before=$(pgbench_run single-before scripts/bench_naive_ingest.sql)
bare_before=$(pgbench_run bare-before scripts/bench_bare_ingest.sql)
one_trip_before=$(pgbench_run bare-one-trip-before "$bare_one_trip")
batch=$(pgbench_run batch scripts/bench_batch_ingest.sql -D batch=32)

if [[ "${BENCH_FLOOR:-1}" != 0 ]]; then
  p=$(free_port)
  "$out/loadgen" floor -addr "127.0.0.1:$p" -secrets "$secret" >"$out/floor.log" 2>&1 &
  pids+=("$!")
  wait_ready "http://127.0.0.1:$p/healthz" "$!" "$out/floor.log"
  say "floor server on 127.0.0.1:$p"
  "$out/loadgen" run -floor -label floor -url "http://127.0.0.1:$p/webhooks/stripe" -secret "$secret" \
    -out "$out" -save "$out/results.json" -script scripts/bench.lua -seconds "$seconds" -levels "$levels" -rate 0
  stop_all
fi

say "paygate, one instance (log: tmp/bench/paygate-1.log)"
start_paygate 1
profile=()
[[ -n "${BENCH_PROFILE:-}" ]] && profile=(-cpuprofile "$out/cpu.pprof" -ops-token "$token")
run_loadgen -label paygate -budget -url "$started_base/webhooks/stripe" -levels "$levels" -pids "$started_pid" \
  -warmup "${BENCH_WARMUP:-5000}" -rate "${BENCH_RATE:-1000}" -rate-seconds "${BENCH_RATE_SECONDS:-10}" \
  -rate-connections "${BENCH_RATE_CONNECTIONS:-64}" "${profile[@]}"
stop_all

if [[ "${BENCH_PEERS:-1}" != 0 ]]; then
  peer_runs=(store sync)
  [[ "${BENCH_LIMITS:-0}" != 0 ]] && peer_runs+=(store-grouped sync-grouped contract-grouped inbox-grouped)
  for run in "${peer_runs[@]}"; do
    mode=${run%-grouped}
    group=() label=peer-$mode peer_url=$url schema=peer
    if [[ $run == contract-grouped || $run == inbox-grouped ]]; then
      # paygate's own tables: the anchor's database, migrated afresh.
      fresh_anchor
      group=(-group) label=limit-$mode peer_url=$anchor_url schema=public
      if [[ $run == contract-grouped ]]; then
        say "the least work with paygate's rows: the webhooks waiting together applied in one transaction (log: tmp/bench/peer-$run.log)"
      else
        say "the least work with paygate's ingest rows: the webhooks waiting together kept by paygate's ingest statements (log: tmp/bench/peer-$run.log)"
      fi
    elif [[ $run == *-grouped ]]; then
      group=(-group) label=limit-$mode
      say "the least work, $mode: the webhooks waiting together in one transaction (log: tmp/bench/peer-$run.log)"
    else
      say "peer, $mode: the gateway a team would write instead (log: tmp/bench/peer-$run.log)"
    fi
    # A fresh schema each, left behind by neither: the runs after these
    # measure paygate's database as it was.
    "$psql" "$url" -qc "SET client_min_messages = warning; DROP SCHEMA IF EXISTS peer CASCADE" >/dev/null
    p=$(free_port)
    "$out/loadgen" peer -mode "$mode" "${group[@]}" -addr "127.0.0.1:$p" -database-url "$peer_url" -schema "$schema" -secret "$secret" \
      >"$out/peer-$run.log" 2>&1 &
    peer_pid=$!
    pids+=("$peer_pid")
    wait_ready "http://127.0.0.1:$p/healthz" "$peer_pid" "$out/peer-$run.log"
    grouped=()
    [[ ${#group[@]} -gt 0 ]] && grouped=(-grouped)
    run_loadgen -label "$label" -peer "$mode" "${grouped[@]}" -url "http://127.0.0.1:$p/webhooks/stripe" -levels "$levels" \
      -pids "$peer_pid" -warmup "${BENCH_WARMUP:-5000}" -rate 0 -database-url "$peer_url"
    stop_all
    "$psql" "$url" -qc "SET client_min_messages = warning; DROP SCHEMA IF EXISTS peer CASCADE" >/dev/null
  done
fi

if [[ "${BENCH_ENDPOINT:-1}" != 0 ]]; then
  # Pairs of runs on one instance, one with an endpoint attached and one
  # without (alternate_pairs).
  pairs=${BENCH_ENDPOINT_PAIRS:-3}
  say "paygate, one instance, $pairs pairs of runs with and without one endpoint (log: tmp/bench/paygate-endpoint.log)"
  start_receiver receiver.log
  receiver="$receiver_base/paygate"
  receiver_count() { curl -fsS "$receiver_base/count"; }
  start_paygate endpoint
  # The first run warms the instance up with the endpoint attached, so
  # that the deliveries' statistics are a gateway in service's.
  warmup=${BENCH_WARMUP:-5000}
  with_endpoint() { # PAIR
    local endpoint before
    endpoint=$(curl -fsS -X POST "$started_base/v1/endpoints" -H "Authorization: Bearer $token" \
      -H "Idempotency-Key: bench-endpoint-$1-$RANDOM$RANDOM" -H 'Content-Type: application/json' \
      -d "{\"url\":\"$receiver\",\"event_types\":[\"*\"],\"description\":\"make bench\"}" | sed -n 's/.*"id": "\(ep_[a-z2-7]*\)".*/\1/p')
    [[ -n "$endpoint" ]] || { say "could not register the endpoint"; return 1; }
    before=$(receiver_count)
    run_loadgen -label "paygate-endpoint-$1" -pair "$1" -delivery -budget -receiver-pid "$receiver_pid" -url "$started_base/webhooks/stripe" \
      -levels "${BENCH_ENDPOINT_LEVELS:-64}" -pids "$started_pid" -warmup "$warmup" -rate 0 "${profile[@]}"
    warmup=0 profile=()
    say "pair $1: the receiver took $(( $(receiver_count) - before )) deliveries"
    # The run without it measures no delivery.
    curl -fsS -X DELETE "$started_base/v1/endpoints/$endpoint" -H "Authorization: Bearer $token" >/dev/null
    # Its deliveries went with it, every row of the two tables. Autovacuum
    # would clean and analyze them after that; the shared server may run
    # without it, and the next endpoint would probe through the dead rows
    # on statistics of their first few hundred.
    "$psql" "$url" -qc "VACUUM (ANALYZE) deliveries, delivery_attempts" >/dev/null
  }
  without_endpoint() { # PAIR
    run_loadgen -label "paygate-plain-$1" -pair "$1" -budget -url "$started_base/webhooks/stripe" \
      -levels "${BENCH_ENDPOINT_LEVELS:-64}" -pids "$started_pid" -warmup "$warmup" -rate 0
    warmup=0
  }
  profile=()
  [[ -n "${BENCH_PROFILE:-}" ]] && profile=(-cpuprofile "$out/cpu-endpoint.pprof" -ops-token "$token")
  alternate_pairs "$pairs" with_endpoint without_endpoint
  stop_started
  if [[ "${BENCH_LIMITS:-0}" != 0 && "${BENCH_PEERS:-1}" != 0 ]]; then
    # The limit for these pairs: the least work with paygate's rows (the
    # contract peer) with the same receiver attached and without, each run
    # on a peer of its own, on the anchor's database migrated afresh.
    say "the least work with paygate's rows, $pairs pairs of runs with and without one endpoint (logs: tmp/bench/peer-limit-endpoint-*.log)"
    fresh_anchor
    limit_pair_run() { # PAIR with|without
      local p with=() endpoint=()
      p=$(free_port)
      [[ $2 == with ]] && with=(-with) endpoint=(-endpoint "$receiver_base/limit")
      "$out/loadgen" peer -mode contract -group "${endpoint[@]}" -addr "127.0.0.1:$p" -database-url "$anchor_url" -schema public \
        -secret "$secret" >"$out/peer-limit-endpoint-$2-$1.log" 2>&1 &
      started_pid=$!
      pids+=("$started_pid")
      wait_ready "http://127.0.0.1:$p/healthz" "$started_pid" "$out/peer-limit-endpoint-$2-$1.log"
      run_loadgen -label "limit-endpoint-$2-$1" -peer contract -grouped -pair "$1" -pair-of limit-endpoint "${with[@]}" \
        -url "http://127.0.0.1:$p/webhooks/stripe" -levels "${BENCH_ENDPOINT_LEVELS:-64}" -pids "$started_pid" \
        -warmup "${BENCH_WARMUP:-5000}" -rate 0 -database-url "$anchor_url"
      stop_started
    }
    limit_with() { limit_pair_run "$1" with; }
    limit_without() { limit_pair_run "$1" without; }
    alternate_pairs "$pairs" limit_with limit_without
  fi
  stop_all
fi

if [[ "${BENCH_SWEEP:-0}" != 0 ]]; then
  # Pairs of runs (alternate_pairs), each on an instance of its own: one
  # started with the missed-event sweep every 10 s against the Stripe API
  # `loadgen run -stripe-api` serves, one without (no API key, no sweep).
  # The API lists the events the run sends, each 5 s after its created
  # time, which is the second it is expected to be sent in: the sweep finds
  # nothing missing, and its cost is its listing and its inbox lookups.
  # Both runs serve the API and make their events alike, and hold 10 s
  # after the warm-up, in which the sweep's first run (a period after its
  # instance leads) lists the warm-up's events.
  pairs=${BENCH_SWEEP_PAIRS:-3}
  say "paygate, $pairs pairs of runs with and without the Stripe sweep, an instance each (logs: tmp/bench/paygate-sweep-*.log)"
  # free_port runs in a subshell here: move past the port by hand, as no
  # one listens on it until a run does.
  api=$(free_port); next_port=$((api + 1))
  sweep_key=sk_test_bench_sweep
  title="$title
sweep pairs: the run with it on a paygate started with PAYGATE_STRIPE_SWEEP_EVERY=10s (PAYGATE_STRIPE_SWEEP_RATE's default: 10 list requests/s)"
  sweep_flags=(-stripe-api "127.0.0.1:$api" -stripe-api-key "$sweep_key" -hold 10s)
  with_sweep() { # PAIR
    own_instance_run sweep "$1" with PAYGATE_STRIPE_SWEEP_EVERY=10s PAYGATE_STRIPE_API_KEY="$sweep_key" \
      PAYGATE_STRIPE_API_URL="http://127.0.0.1:$api" -- "${sweep_flags[@]}"
  }
  without_sweep() { own_instance_run sweep "$1" without -- "${sweep_flags[@]}"; }
  alternate_pairs "$pairs" with_sweep without_sweep
fi

if [[ "${BENCH_TRACING:-0}" != 0 ]]; then
  # Pairs of runs (alternate_pairs), each on an instance of its own: one
  # tracing every span to a local receiver over OTLP/HTTP, one without.
  pairs=${BENCH_TRACING_PAIRS:-3}
  say "paygate, $pairs pairs of runs with and without tracing, an instance each (logs: tmp/bench/paygate-tracing-*.log)"
  start_receiver otlp-receiver.log
  otlp=$receiver_base
  title="$title
tracing pairs: the run with it on a paygate started with OTEL_EXPORTER_OTLP_ENDPOINT=$otlp (loadgen receive) and OTEL_TRACES_SAMPLER=always_on, the SDK's default batching"
  with_tracing() { # PAIR
    own_instance_run tracing "$1" with OTEL_EXPORTER_OTLP_ENDPOINT="$otlp" OTEL_TRACES_SAMPLER=always_on \
      -- -traces "$otlp" -receiver-pid "$receiver_pid"
  }
  without_tracing() { own_instance_run tracing "$1" without --; }
  alternate_pairs "$pairs" with_tracing without_tracing
  stop_all
fi

if [[ "${BENCH_NATS:-1}" != 0 ]]; then
  say "paygate, one instance, publishing to NATS JetStream (logs: tmp/bench/paygate-nats.log, tmp/bench/nats.log)"
  natsbin=$(scripts/nats-server.sh)
  natsver=$("$natsbin" --version 2>&1 | head -1)
  rm -rf "$out/nats"
  # free_port runs in a subshell here: move past each port by hand.
  np=$(free_port); next_port=$((np + 1))
  nm=$(free_port); next_port=$((nm + 1))
  "$natsbin" -js -a 127.0.0.1 -p "$np" -m "$nm" -sd "$out/nats" -n paygate-bench >"$out/nats.log" 2>&1 &
  pids+=("$!")
  wait_ready "http://127.0.0.1:$nm/healthz?js-enabled-only=true" "$!" "$out/nats.log"
  say "$natsver on 127.0.0.1:$np (JetStream, file storage in tmp/bench/nats)"
  title="$title
NATS run: $natsver, JetStream file storage on the same machine"
  start_paygate nats "" PAYGATE_NATS_URL="nats://127.0.0.1:$np"
  run_loadgen -label paygate-nats -nats -url "$started_base/webhooks/stripe" \
    -levels "${BENCH_NATS_LEVELS:-64}" -pids "$started_pid" -warmup "${BENCH_WARMUP:-5000}" -rate 0
  stop_all
  rm -rf "$out/nats"
fi

if [[ "${BENCH_SCALEOUT:-1}" != 0 ]]; then
  for n in ${BENCH_SCALEOUT_INSTANCES:-1 2 4}; do
    say "scale-out: $n instance(s) behind the proxy"
    # paygate serve opens a pool of up to 40 connections; instances sharing
    # the server split its max_connections (less ten for everyone else),
    # through pool_max_conns in their URL, as docs/configuration.md says to.
    pool=$(( (maxconns - 10) / n ))
    (( pool > 40 )) && pool=40
    say "scale-out: $n instance(s) of $pool connections each"
    backends=() started=()
    for i in $(seq "$n"); do
      start_paygate "scale$n-$i" "$pool"
      backends+=("$started_base") started+=("$started_pid")
    done
    p=$(free_port)
    "$out/loadgen" proxy -addr "127.0.0.1:$p" -backends "$(IFS=,; echo "${backends[*]}")" >"$out/proxy-$n.log" 2>&1 &
    pids+=("$!")
    wait_ready "http://127.0.0.1:$p/readyz" "$!" "$out/proxy-$n.log"
    run_loadgen -label "scale-$n" -proxied -instances "$n" -url "http://127.0.0.1:$p/webhooks/stripe" \
      -metrics "$(IFS=,; echo "${backends[*]}")" -pids "$(IFS=,; echo "${started[*]}")" \
      -levels "${BENCH_SCALEOUT_LEVELS:-64,256}" -seconds "${BENCH_SCALEOUT_SECONDS:-6}" -warmup 0 -rate 0
    stop_all
  done
fi

single_after=$(pgbench_run single-after scripts/bench_naive_ingest.sql)
bare_after=$(pgbench_run bare-after scripts/bench_bare_ingest.sql)
one_trip_after=$(pgbench_run bare-one-trip-after "$bare_one_trip")
"$out/loadgen" report -results "$out/results.json" -pgbench-single "$single_before,$single_after" \
  -pgbench-bare "$bare_before,$bare_after" -pgbench-bare-one-trip "$one_trip_before,$one_trip_after" \
  -pgbench-batch "$batch" -batch-size 32 -title "$title" | tee "$out/report.txt"
