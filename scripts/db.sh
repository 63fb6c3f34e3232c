#!/usr/bin/env bash
# Prints a PostgreSQL URL for paygate to use, making sure a server is there:
#   1. $DATABASE_URL when set;
#   2. else a server already listening on 127.0.0.1:5432 (trust auth, user postgres);
#   3. else a private cluster under .pgdata/ (git-ignored), started with the
#      machine's initdb/pg_ctl on a free port (as the postgres user when root,
#      since initdb refuses to run as root);
#   4. else it says how to install PostgreSQL and fails.
# PAYGATE_PRIVATE_PG=1 skips 1 and 2 (tests that restart their own server).
# PAYGATE_PG_OPTIONS adds server options to the private cluster's start
# (make bench's BENCH_PGSS=1 loads pg_stat_statements so); a running one
# started with other options is restarted with these.
# The database named by $1 (default "paygate") is created when missing.
# `scripts/db.sh --stop` stops the private cluster, if one runs.
# Progress goes to stderr; only the URL goes to stdout.
set -euo pipefail
db="${1:-paygate}"
root="$(cd "$(dirname "$0")/.." && pwd)"
say() { echo "db: $*" >&2; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# shellcheck source=scripts/pg-bin.sh
source "$(dirname "${BASH_SOURCE[0]}")/pg-bin.sh"

create_db() { # host port
  local psql
  psql=$(find_pg_bin psql) || { say "psql not found; assuming database $db exists"; return 0; }
  if ! "$psql" -h "$1" -p "$2" -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
    say "creating database $db"
    "$psql" -h "$1" -p "$2" -U postgres -d postgres -qc "CREATE DATABASE \"$db\"" >/dev/null
  fi
}

data="$root/.pgdata"
as_pg() { if [[ $(id -u) == 0 ]]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
data="$(readlink -f "$data" 2>/dev/null || echo "$data")"
portfile="$data/port"

if [[ "${1:-}" == "--stop" ]]; then
  if [[ -f "$data/cluster/postmaster.pid" ]]; then
    pg_ctl=$(find_pg_bin pg_ctl) || { say "no pg_ctl on this machine"; exit 1; }
    as_pg "$pg_ctl" -D "$data/cluster" stop -m fast >/dev/null
    say "stopped the private cluster in $data/cluster"
  fi
  exit 0
fi

if [[ -n "${DATABASE_URL:-}" && -z "${PAYGATE_PRIVATE_PG:-}" ]]; then
  echo "$DATABASE_URL"
  exit 0
fi

if [[ -z "${PAYGATE_PRIVATE_PG:-}" ]] && listening 5432; then
  create_db 127.0.0.1 5432
  echo "postgres://postgres@127.0.0.1:5432/$db?sslmode=disable"
  exit 0
fi

options="${PAYGATE_PG_OPTIONS:-}"
if [[ -f "$portfile" ]] && listening "$(cat "$portfile")" && [[ "$(cat "$data/options" 2>/dev/null)" != "$options" ]]; then
  say "restarting the private cluster with the options '$options'"
  as_pg "$(find_pg_bin pg_ctl)" -D "$data/cluster" -w stop -m fast >/dev/null
fi
if [[ -f "$portfile" ]] && listening "$(cat "$portfile")"; then
  port=$(cat "$portfile")
else
  initdb=$(find_pg_bin initdb) && pg_ctl=$(find_pg_bin pg_ctl) || {
    say "no PostgreSQL server on 127.0.0.1:5432 and no initdb/pg_ctl on this machine."
    say "install it (Debian: sudo apt-get install -y postgresql) or set DATABASE_URL."
    exit 1
  }
  if [[ $(id -u) == 0 ]] && ! id postgres >/dev/null 2>&1; then
    say "running as root and there is no 'postgres' user for initdb; create one (useradd -r postgres) or set DATABASE_URL."
    exit 1
  fi
  # As root the server runs as postgres, which may not be able to enter the
  # checkout (a clone under /root, say): then the cluster lives under /var/tmp
  # and .pgdata links to it, so every other path stays the same.
  if [[ $(id -u) == 0 && ! -e "$data" ]] && id postgres >/dev/null 2>&1 && ! runuser -u postgres -- test -x "$root"; then
    outside="/var/tmp/paygate-pgdata-$(printf '%s' "$root" | sha1sum | cut -c1-12)"
    mkdir -p "$outside" && chown postgres "$outside"
    ln -s "$outside" "$data"
  fi
  data="$(readlink -f "$data" 2>/dev/null || echo "$data")"
  portfile="$data/port"
  if [[ ! -f "$data/cluster/PG_VERSION" ]]; then
    say "initialising a private cluster in $data/cluster"
    mkdir -p "$data"
    [[ $(id -u) == 0 ]] && chown postgres "$data"
    as_pg "$initdb" -D "$data/cluster" -U postgres --auth=trust -E UTF8 >/dev/null
  fi
  port=54329
  while listening "$port"; do port=$((port + 1)); done
  say "starting the private cluster on 127.0.0.1:$port"
  as_pg "$pg_ctl" -D "$data/cluster" -w -l "$data/cluster/server.log" \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $data -c fsync=on $options" start >/dev/null
  echo "$port" > "$portfile"
  echo "$options" > "$data/options"
fi
create_db 127.0.0.1 "$port"
echo "postgres://postgres@127.0.0.1:$port/$db?sslmode=disable"
