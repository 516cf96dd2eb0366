#!/usr/bin/env bash
# The HA bench (issue 38, docs/ha.md "Benchmark"): runs per second through 1 lead on SQLite,
# then 1, 2 and 3 `antler up` leads sharing one throwaway PostgreSQL (runs store and leases),
# as ratios to the SQLite lead; then the takeover time (p50, max) from a lead's SIGKILL to
# its runs' `lead_takeover` event on the surviving lead. The driver is scripts/ha_bench.py
# (its docstring lists the knobs: HA_BENCH_RUNS, HA_BENCH_CLIENTS, HA_BENCH_KILLS, ...).
#
#   scripts/ha-bench.sh                       # the debug binaries of target/debug
#   ANTLER_BIN_DIR=target/release scripts/ha-bench.sh
#
# Needs PostgreSQL's server binaries (Debian's postgresql-15; PG_BIN names another bin
# directory) and, as root, the `postgres` user its package makes.
set -euo pipefail
cd "$(dirname "$0")/.."
export ANTLER_BIN_DIR=${ANTLER_BIN_DIR:-target/debug}
export PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
if [ ! -x "$PG_BIN/postgres" ]; then
  echo "ha-bench: no PostgreSQL in $PG_BIN: apt-get install postgresql-15 (or set PG_BIN)" >&2
  exit 2
fi
if [ ! -x "$ANTLER_BIN_DIR/antler" ] && [ "$ANTLER_BIN_DIR" = target/debug ]; then
  cargo build --workspace --bins
fi
exec python3 scripts/ha_bench.py
