# Sourced by the scripts that run PostgreSQL's own programs (initdb,
# pg_ctl, psql, pgbench): Debian installs them under
# /usr/lib/postgresql/<version>/bin, off PATH.
#
# find_pg_bin TOOL prints the path of TOOL, from PATH first.
find_pg_bin() {
  local tool="$1" c
  if c=$(command -v "$tool" 2>/dev/null); then echo "$c"; return 0; fi
  for c in /usr/lib/postgresql/*/bin/"$tool" /usr/local/pgsql/bin/"$tool"; do
    [[ -x "$c" ]] && { echo "$c"; return 0; }
  done
  return 1
}
