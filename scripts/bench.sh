#!/usr/bin/env bash
# `make bench`: paygate's ingest and end-to-end throughput against
# PostgreSQL's own limit, measured in one run (see docs/performance.md).
#
#   1. builds paygate and cmd/loadgen into tmp/bench/ (bin/ is left alone);
#   2. drops and recreates the database paygate_bench on the server
#      scripts/db.sh finds (never $DATABASE_URL's database), and migrates it;
#   3. runs the pgbench baseline: 32 clients, each transaction the naive
#      ingest shape (one inbox_events row and one river_job row, committed
#      with fsync), into the real tables of the migrated bench database, then
#      empties them;
#   4. starts `paygate serve` on that database and drives it with
#      the load generator (pre-signed simulator events);
#   5. stops paygate, runs the pgbench baseline once more, and prints the
#      table, the ratios against the mean of the two baselines.
#
# Knobs (environment): BENCH_PAYMENTS (12000), BENCH_CONCURRENCY (256),
# BENCH_RATE (1000 events/s offered), BENCH_RATE_SECONDS (10),
# BENCH_PGBENCH_SECONDS (15), BENCH_PROFILE=1 saves a CPU profile of the
# throughput phase in tmp/bench/cpu.pprof, BENCH_INGEST=tx builds paygate with
# one transaction per event instead of group commit, for comparison.
# Logs go to tmp/bench/ (git-ignored).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/tmp/bench"
mkdir -p "$out"
say() { echo "bench: $*" >&2; }

find_pg_bin() {
  local tool="$1" c
  if c=$(command -v "$tool" 2>/dev/null); then echo "$c"; return 0; fi
  for c in /usr/lib/postgresql/*/bin/"$tool" /usr/local/pgsql/bin/"$tool"; do
    [[ -x "$c" ]] && { echo "$c"; return 0; }
  done
  return 1
}
pgbench=$(find_pg_bin pgbench) || { say "pgbench not found (Debian: apt-get install postgresql-client)"; exit 1; }
psql=$(find_pg_bin psql) || { say "psql not found"; exit 1; }

say "building"
ldflags=""
[[ "${BENCH_INGEST:-batch}" == tx ]] && ldflags="-X main.ingestMode=tx"
go build -ldflags "$ldflags" -o "$out/paygate" ./cmd/paygate
go build -o "$out/loadgen" ./cmd/loadgen

db=paygate_bench
url=$(DATABASE_URL= scripts/db.sh "$db")
admin="${url/\/$db\?/\/postgres?}"
say "recreating database $db"
"$psql" "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
url=$(DATABASE_URL= scripts/db.sh "$db" 2>/dev/null)
DATABASE_URL="$url" "$out/paygate" migrate >"$out/migrate.log" 2>&1

pgver=$("$psql" "$url" -tAc "SHOW server_version")
fsync=$("$psql" "$url" -tAc "SHOW fsync")
synccommit=$("$psql" "$url" -tAc "SHOW synchronous_commit")
hostport=$(sed -E 's|^postgres(ql)?://[^@]*@([^/]*)/.*$|\2|' <<<"$url")
host=${hostport%:*}
port=${hostport##*:}

secs=${BENCH_PGBENCH_SECONDS:-15}
baseline() { # prints the tps of one pgbench run of the naive transaction
  "$pgbench" -h "$host" -p "$port" -U postgres -n -c 32 -j 2 -T "$secs" \
    -f scripts/bench_naive_ingest.sql "$db" >"$out/pgbench-$1.log" 2>&1 || { cat "$out/pgbench-$1.log" >&2; return 1; }
  local tps
  tps=$(sed -nE 's/^tps = ([0-9.]+) \(without initial connection time\)$/\1/p' "$out/pgbench-$1.log")
  [[ -n "$tps" ]] || { cat "$out/pgbench-$1.log" >&2; say "could not read pgbench's tps"; return 1; }
  say "pgbench ($1): $tps tps"
  echo "$tps"
}
say "pgbench baseline: 32 clients, ${secs}s, scripts/bench_naive_ingest.sql, before and after paygate"
tps_before=$(baseline before)
"$psql" "$url" -qc "TRUNCATE inbox_events, river_job RESTART IDENTITY" -c "CHECKPOINT" >/dev/null

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
addr_port=18080
while ! port_free "$addr_port"; do addr_port=$((addr_port + 1)); done
secret=whsec_bench_paygate
token=bench-ops-token
say "starting paygate serve on 127.0.0.1:$addr_port (log: tmp/bench/paygate.log)"
DATABASE_URL="$url" PAYGATE_ADDR="127.0.0.1:$addr_port" PAYGATE_STRIPE_WEBHOOK_SECRETS="$secret" \
  PAYGATE_OPS_TOKENS="$token" "$out/paygate" serve >"$out/paygate.log" 2>&1 &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; }
trap stop EXIT
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$addr_port/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { tail -20 "$out/paygate.log" >&2; exit 1; }
  sleep 0.1
done

profile=()
[[ -n "${BENCH_PROFILE:-}" ]] && profile=(-cpuprofile "$out/cpu.pprof" -ops-token "$token")
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)
title="paygate make bench, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $mem RAM, PostgreSQL $pgver (fsync=$fsync, synchronous_commit=$synccommit), ingest=${BENCH_INGEST:-batch}"
"$out/loadgen" -url "http://127.0.0.1:$addr_port/webhooks/stripe" -secret "$secret" -database-url "$url" \
  -payments "${BENCH_PAYMENTS:-12000}" -concurrency "${BENCH_CONCURRENCY:-256}" \
  -rate "${BENCH_RATE:-1000}" -rate-duration "${BENCH_RATE_SECONDS:-10}s" \
  -pid "$pid" -title "$title" -save "$out/results.json" "${profile[@]}"
stop
trap - EXIT
# The second baseline, with paygate stopped, brackets the measurement: on a
# shared machine the load drifts, and the ratios use the mean of the two.
tps_after=$(baseline after)
"$out/loadgen" -report "$out/results.json" -pgbench-tps "$tps_before,$tps_after"
