#!/usr/bin/env bash
# The chaos suite: `antler chaos` against a local cluster of its own, with faults fired at
# random (seeded) times under concurrent runs, and a report of what held. Installs what it
# needs like scripts/example.sh (bubblewrap, the pinned `everything` MCP server), builds the
# release binaries (or uses ANTLER_BIN_DIR), prints the report's table, ends with the report
# as one JSON line, and exits non-zero when an invariant breaks.
#
#   scripts/chaos.sh [--seed S] [--runs N] [--minutes M] [--mode local|multi-host|multi-lead] [antler chaos flags]
#
# --mode multi-host (root: network namespaces) puts every host in a namespace of its own,
# over TLS, each behind a TCP fault proxy (PyPI faulty, installed here), and adds the
# network faults (delay, drop, throttle, corrupt, a cut link) to the process faults.
# --mode multi-lead runs --leads N (default 3) leads on one PostgreSQL (Debian's
# postgresql-15, installed here, in a throwaway cluster; or --pg-dsn) and kills, pauses and
# partitions them mid-run.
#
# The soak: scripts/chaos.sh --runs 200 --minutes 30 (and --no-faults for the baseline).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=local
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) mode=$2; shift 2 ;;
    --mode=*) mode=${1#--mode=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$mode" in
  local) ;;
  multi-host)
    if [ "$(id -u)" != 0 ]; then
      echo "chaos: --mode multi-host creates network namespaces: run it with sudo" >&2
      exit 2
    fi ;;
  multi-lead) ;;
  *) echo "chaos: --mode is local, multi-host or multi-lead, not $mode" >&2; exit 2 ;;
esac

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ "$mode" = multi-lead ] && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 \
  && [ -z "${ANTLER_CHAOS_PG_BIN:-}" ] && ! printf '%s\n' "${args[@]}" | grep -q '^--pg-dsn'; then
  need_apt+=(postgresql-15)
fi
if [ "$mode" = multi-host ]; then
  command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
  command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
fi
if [ ! -x tests/node_modules/.bin/mcp-server-everything ]; then
  (cd tests && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ "$mode" = multi-host ] && ! command -v faulty >/dev/null 2>&1; then
  # The TCP fault proxy, pinned in tests/requirements.txt.
  python3 -m pip install --quiet --disable-pip-version-check \
    "$(grep -E '^faulty==' tests/requirements.txt)"
fi
if [ -n "${ANTLER_BIN_DIR:-}" ]; then
  bin=$(cd "$ANTLER_BIN_DIR" && pwd)
  export ANTLER_BIN_DIR=$bin
else
  cargo build --release --workspace --bins
  bin=$root/target/release
fi
export PATH="$root/tests/node_modules/.bin:$PATH"
exec "$bin/antler" chaos --mode "$mode" "${args[@]}"
