# Sourced by scripts/bench.sh and scripts/bench-growth.sh, after
# scripts/pg-bin.sh: their databases, on the server scripts/db.sh finds
# (never $DATABASE_URL's).
#
# bench_admin_url URL DB prints URL naming the server's postgres database
# instead of DB.
bench_admin_url() {
  local admin="${1/\/$2\?/\/postgres?}"
  [[ "$admin" != "$1" ]] || admin="${1%/"$2"}/postgres"
  echo "$admin"
}

# bench_db_drop ADMIN DB drops DB if it exists, forcing its sessions off.
bench_db_drop() {
  local psql
  psql=$(find_pg_bin psql) || { echo "psql not found" >&2; return 1; }
  PGOPTIONS='-c client_min_messages=warning' "$psql" "$1" -qc "DROP DATABASE IF EXISTS $2 WITH (FORCE)" >/dev/null
}

# bench_db_recreate ADMIN DB drops DB, forcing its sessions off, creates it
# again and prints its URL.
bench_db_recreate() {
  bench_db_drop "$1" "$2" || return 1
  DATABASE_URL='' scripts/db.sh "$2" 2>/dev/null
}
