#!/usr/bin/env bash
# Several leads on one PostgreSQL (docs/ha.md, issue 38) on this machine: starts a throwaway
# PostgreSQL 15 (Debian's binaries, as the tests do) and two `antler up` leads, A and B, each
# with its own hosts, runtime directory and gateway port, sharing the runs store and the
# leases (ANTLER_STORE_DSN), the sandboxes' base directory and one gateway token. It submits
# 20 runs of a scripted model (a playbook that writes a file, "thinks" for a while, writes
# another and presents both) alternately to A's and B's gateways, waits until every run took
# its first step, and kills with SIGKILL the lead that holds the most leases (`run_leases`).
# The survivor takes those runs over once their leases lapse and completes them. It prints
# to stderr how many runs were taken over and their `lead_takeover` events, then each run's
# final object (GET /api/runs/{id} from the survivor) on stdout, the last line a JSON array
# of them, and tears everything down (PostgreSQL too), also when interrupted.
#
# Installs what it needs like scripts/example.sh (PostgreSQL 15 like scripts/test.sh).
# ANTLER_BIN_DIR=DIR uses the binaries in DIR instead of building release ones;
# HA_DEMO_RUNS=N submits N runs instead of 20.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
runs=${HA_DEMO_RUNS:-20}

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
[ -x /usr/lib/postgresql/15/bin/postgres ] || need_apt+=(postgresql-15)
sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo)
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
pgbin=${ANTLER_TEST_PG_BIN:-/usr/lib/postgresql/15/bin}
if [ -n "${ANTLER_BIN_DIR:-}" ]; then
  bin=$(cd "$ANTLER_BIN_DIR" && pwd)
else
  cargo build --release --workspace --bins
  bin=$root/target/release
fi

work=$(mktemp -d /tmp/antler-ha-demo.XXXXXX)
chmod 755 "$work"
pgdata=$work/pg/data
pids=()
pg_started=""

# as_pg CMD...: CMD as PostgreSQL's server user (`postgres` under root: initdb and postgres
# refuse to run as root), else as ourselves.
as_pg() {
  if [ "$(id -u)" = 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; else "$@"; fi
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    local left=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "$pg_started" ]; then
    as_pg "$pgbin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null 2>&1 || true
  fi
  if [ "$status" = 0 ]; then rm -rf "$work"; else echo "ha-demo: logs kept in $work" >&2; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# PostgreSQL: a cluster of its own in the work directory, on loopback and a socket there.
mkdir -p "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work/pg"
pgport=$(free_port)
echo "ha-demo: PostgreSQL ($pgbin) on 127.0.0.1:$pgport" >&2
as_pg "$pgbin/initdb" -D "$pgdata" -U postgres -A trust --no-sync -E UTF8 --locale=C >"$work/initdb.log" 2>&1
pg_started=yes
as_pg "$pgbin/pg_ctl" -D "$pgdata" -l "$work/pg/postgres.log" -w -t 60 \
  -o "-k $work/pg -p $pgport -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50" \
  start >/dev/null
psql() { "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pgport" -U postgres "$@"; }
psql -d postgres -c "CREATE DATABASE antler"
export ANTLER_STORE_DSN="postgres://postgres@127.0.0.1:$pgport/antler"
sql() { psql -d antler -At -c "$1"; }

# The leads' config: the sandbox's file tools, nothing that needs the network.
cat >"$work/config.yaml" <<'EOF'
tools:
  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
tool_search:
  enabled: false
EOF
# Each run writes a.md, "thinks" 12 s (when the lead is killed), writes b.md and presents both.
playbook='turns:
  - tool_calls:
      - {name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - delay_ms: 12000
    tool_calls:
      - {name: write_file, args: {description: second, path: /mnt/user-data/outputs/b.md, content: b}}
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/a.md", "/mnt/user-data/outputs/b.md"]}}
  - content: Both files are written and presented.
'

token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
names=(A B)
ports=()
for i in 0 1; do
  ports+=("$(free_port)")
  echo "ha-demo: lead ${names[$i]}: antler --runtime-dir $work/run-${names[$i]} up, gateway 127.0.0.1:${ports[$i]}" >&2
  ANTLER_GATEWAY_ADDR=127.0.0.1:${ports[$i]} ANTLER_GATEWAY_TOKEN=$token \
    ANTLER_SANDBOX_BASE_DIR=$work/base RUST_LOG=${RUST_LOG:-info} \
    "$bin/antler" --runtime-dir "$work/run-${names[$i]}" up --workers 0 --config "$work/config.yaml" \
    </dev/null >"$work/lead-${names[$i]}.log" 2>&1 &
  pids+=($!)
done

api() { # api LEAD_INDEX METHOD PATH [BODY]
  curl -sS --fail-with-body -X "$2" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' "http://127.0.0.1:${ports[$1]}$3" ${4:+-d "$4"}
}
echo "ha-demo: waiting for both leads and their hosts" >&2
for i in 0 1; do
  up=""
  for _ in $(seq 1 300); do
    if "$bin/antler" --runtime-dir "$work/run-${names[$i]}" status --json 2>/dev/null | python3 -c '
import json, sys
ps = json.load(sys.stdin)
sys.exit(0 if len(ps) == 3 and all(p["healthy"] for p in ps) else 1)' 2>/dev/null &&
      api "$i" GET /api/runs >/dev/null 2>&1; then
      up=yes
      break
    fi
    sleep 0.2
  done
  if [ -z "$up" ]; then
    echo "ha-demo: lead ${names[$i]} did not come up; see $work/lead-${names[$i]}.log" >&2
    exit 1
  fi
done

body=$(python3 -c 'import json, sys; print(json.dumps({"task": "Write two files and present them", "playbook_yaml": sys.argv[1]}))' "$playbook")
ids=()
for n in $(seq 0 $((runs - 1))); do
  i=$((n % 2))
  id=$(api "$i" POST /api/runs "$body" | python3 -c 'import json, sys; print(json.load(sys.stdin)["run_id"])')
  ids+=("$id")
  echo "ha-demo: run $id submitted to lead ${names[$i]}" >&2
done

# Mid-run: every run has written a.md (its first step is done) and is "thinking".
echo "ha-demo: waiting for every run's first step" >&2
for id in "${ids[@]}"; do
  for _ in $(seq 1 600); do
    [ -e "$work/base/users/default/threads/$id/user-data/outputs/a.md" ] && break
    sleep 0.1
  done
done
quoted=$(printf "'%s'," "${ids[@]}")
quoted=${quoted%,}
owners=$(sql "SELECT lead_id, count(*) FROM run_leases WHERE run_id IN ($quoted) AND lead_id IS NOT NULL GROUP BY lead_id ORDER BY count(*) DESC")
echo "ha-demo: leases held (lead, runs):" >&2
sed 's/^/  /; s/|/: /' <<<"$owners" >&2
victim=$(head -n1 <<<"$owners" | cut -d'|' -f1)
[ -n "$victim" ] || { echo "ha-demo: no lead holds a lease" >&2; exit 1; }
# The lead id is hostname-pid-random: the pid names the process.
victim_pid=$(rev <<<"$victim" | cut -d- -f2 | rev)
survivor=""
for i in 0 1; do
  if [ "${pids[$i]}" = "$victim_pid" ]; then victim_name=${names[$i]}; else survivor=$i; fi
done
if [ -z "$survivor" ] || [ -z "${victim_name:-}" ]; then
  echo "ha-demo: lease owner $victim is neither lead (pids ${pids[*]})" >&2
  exit 1
fi
victim_runs=$(sql "SELECT run_id FROM run_leases WHERE lead_id = '$victim'" | sort)
echo "ha-demo: kill -9 lead $victim_name ($victim)" >&2
disown "$victim_pid" # no "Killed" line from bash; cleanup still signals it (it is in pids)
kill -KILL "$victim_pid"
killed_ms=$(date +%s%3N)

echo "ha-demo: waiting for every run to end, through lead ${names[$survivor]}'s gateway" >&2
views=()
for id in "${ids[@]}"; do
  view=""
  for _ in $(seq 1 1200); do
    view=$(api "$survivor" GET "/api/runs/$id" 2>/dev/null) || view=""
    if [ -n "$view" ] && python3 -c 'import json, sys; sys.exit(0 if json.loads(sys.argv[1])["status"] not in ("running", "pending") else 1)' "$view" 2>/dev/null; then
      break
    fi
    view=""
    sleep 0.1
  done
  if [ -z "$view" ]; then
    echo "ha-demo: run $id did not end within 120 s (lease: $(sql "SELECT lead_id, epoch, expires_at > now() FROM run_leases WHERE run_id = '$id'"), status: $(sql "SELECT status FROM runs WHERE run_id = '$id'"))" >&2
    exit 1
  fi
  views+=("$(python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1])))' "$view")")
done
echo "ha-demo: all $runs runs ended $(( ($(date +%s%3N) - killed_ms) / 1000 )) s after the kill" >&2

takeovers=$(sql "SELECT event FROM run_events WHERE run_id IN ($quoted) AND event LIKE '%\"lead_takeover\"%' ORDER BY run_id, seq")
taken=$(grep -c . <<<"$takeovers" || true)
echo "ha-demo: $taken of lead $victim_name's $(grep -c . <<<"$victim_runs") runs were taken over, $(python3 -c '
import json, sys
took = [json.loads(e)["at_ms"] - int(sys.argv[1]) for e in sys.argv[2].splitlines() if e]
print(f"{min(took) / 1000:.1f}-{max(took) / 1000:.1f} s after the kill" if took else "none")' "$killed_ms" "$takeovers"); their lead_takeover events:" >&2
sed 's/^/  /' <<<"$takeovers" >&2

printf '%s\n' "${views[@]}"
python3 -c '
import json, sys
runs = [json.loads(v) for v in sys.argv[1:]]
print(json.dumps(runs))
sys.exit(0 if all(r["status"] == "success" for r in runs) else 1)' "${views[@]}"
