#!/usr/bin/env bash
# Cluster mode on one machine, before you have a Kubernetes cluster: brings up the
# multi-host layout in network namespaces (the lead, mcp-host, two sandbox-host replicas
# and two subagent workers, each in a namespace of its own, joined over veth to a bridge
# in a hub namespace, at 10.78.0.0/24 inside those namespaces only), talking TCP with
# mutual TLS on certificates from `antler cluster init`. The lead starts no process: its
# config.yaml has an `antler.cluster` section, and it finds the workers through a name
# that its namespace's /etc/hosts resolves (standing in for a headless Service's DNS).
# It runs the bundled example and a run with two subagent tasks across the workers,
# prints `antler status` and each run's --json object, and tears everything down, also
# when interrupted. The last line of its output is a JSON array of the runs' objects.
#
# Needs root (network namespaces). Installs what it needs like scripts/example.sh.
# ANTLER_BIN_DIR=DIR uses the binaries in DIR instead of building release ones.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "$(id -u)" != 0 ]; then
  echo "cluster-demo: network namespaces need root: run it with sudo" >&2
  exit 1
fi
need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ! -x tests/node_modules/.bin/mcp-server-everything ]; then
  (cd tests && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ -n "${ANTLER_BIN_DIR:-}" ]; then
  bin=$(cd "$ANTLER_BIN_DIR" && pwd)
else
  cargo build --release --workspace --bins
  bin=$root/target/release
fi
everything=$root/tests/node_modules/.bin/mcp-server-everything

work=$(mktemp -d /tmp/antler-cluster-demo.XXXXXX)
chmod 755 "$work"
tag=antler-demo-$$
hub=$tag-hub
nodes=(lead mcp-host sandbox-0 sandbox-1 worker-0 worker-1)
pids=()

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
  for i in "${!nodes[@]}"; do
    ip netns del "$tag-$i" 2>/dev/null || true
    rm -rf "/etc/netns/$tag-$i"
  done
  ip netns del "$hub" 2>/dev/null || true
  if [ "$status" = 0 ]; then rm -rf "$work"; else echo "cluster-demo: logs kept in $work" >&2; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

addr() { echo "10.78.0.$((10 + $1))"; }

echo "cluster-demo: certificates (antler cluster init $work/certs)" >&2
"$bin/antler" cluster init "$work/certs" >/dev/null
ip netns add "$hub"
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for i in "${!nodes[@]}"; do
  ns=$tag-$i
  ip netns add "$ns"
  ip -n "$ns" link add eth0 type veth peer name "h$i" netns "$hub"
  ip -n "$hub" link set "h$i" master br0
  ip -n "$hub" link set "h$i" up
  ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  echo "cluster-demo: ${nodes[$i]} in namespace $ns at $(addr "$i")" >&2
done
# The cluster DNS of the lead's namespace: the workers' name resolves to both workers.
mkdir -p "/etc/netns/$tag-0"
printf '127.0.0.1 localhost\n%s workers.antler.demo\n%s workers.antler.demo\n' \
  "$(addr 4)" "$(addr 5)" >"/etc/netns/$tag-0/hosts"

certs=$work/certs
cat "$root/examples/report/config.yaml" - >"$work/config.yaml" <<EOF
subagents:
  max_concurrent: 2
antler:
  worker_slots: 1
  tls: {ca: $certs/ca.crt, cert: $certs/lead.crt, key: $certs/lead.key}
  cluster:
    sandbox_hosts: ["tcp:$(addr 2):7103", "tcp:$(addr 3):7103"]
    mcp_hosts: ["tcp:$(addr 1):7102"]
    workers: ["tcp:workers.antler.demo:7104"]
    resolve_interval_s: 2
EOF
printf '{"mcpServers": {"everything": {"type": "stdio", "command": "%s", "args": ["stdio"]}}}\n' \
  "$everything" >"$work/extensions_config.json"

# start NODE_INDEX ROLE PROGRAM ARGS...: PROGRAM in the node's namespace, logging to NODE.log.
start() {
  local i=$1 role=$2 program=$3
  shift 3
  local extra=()
  if [ "$role" != lead ]; then
    extra=(--listen "tcp:$(addr "$i"):$1" --token-file "$certs/token" --tls-ca "$certs/ca.crt"
      --tls-cert "$certs/$role.crt" --tls-key "$certs/$role.key" --node-id "${nodes[$i]}")
    shift
  fi
  RUST_LOG=${RUST_LOG:-info} ip netns exec "$tag-$i" "$bin/$program" "${extra[@]}" "$@" \
    >"$work/${nodes[$i]}.log" 2>&1 &
  pids+=($!)
}
start 1 mcp-host antler-mcp-host 7102 --extensions "$work/extensions_config.json" --config "$work/config.yaml"
start 2 sandbox-host antler-sandbox-host 7103 --index 0 --config "$work/config.yaml" --extensions "$work/extensions_config.json" --base-dir "$work/sandbox-0"
start 3 sandbox-host antler-sandbox-host 7103 --index 1 --config "$work/config.yaml" --extensions "$work/extensions_config.json" --base-dir "$work/sandbox-1"
start 4 subagent antler-subagent 7104 --capacity 1
start 5 subagent antler-subagent 7104 --capacity 1
ANTLER_CLUSTER_TOKEN=$(cat "$certs/token") ANTLER_GATEWAY_ADDR=off \
  ANTLER_EXTENSIONS_CONFIG_PATH=$work/extensions_config.json \
  start 0 lead antler --runtime-dir "$work/run" up --config "$work/config.yaml"

antler() { "$bin/antler" --runtime-dir "$work/run" "$@"; }
echo "cluster-demo: waiting for the lead to reach every host" >&2
healthy=""
for _ in $(seq 1 300); do
  if antler status --json 2>/dev/null | python3 -c '
import json, sys
ps = json.load(sys.stdin)
sys.exit(0 if len(ps) == 6 and all(p["healthy"] for p in ps) else 1)' 2>/dev/null; then
    healthy=yes
    break
  fi
  sleep 0.2
done
if [ -z "$healthy" ]; then
  antler status >&2 || true
  echo "cluster-demo: the cluster did not come up; see the logs in $work" >&2
  exit 1
fi
antler status

echo "cluster-demo: the bundled example (examples/report)" >&2
antler run "Write a short report on what the everything server's echo tool answers" \
  --playbook "$root/examples/report/playbook.yaml" --json >"$work/example.json"
echo "cluster-demo: two subagent tasks across the workers (examples/cluster/tasks.yaml)" >&2
antler run "Write two notes, one per subagent" --subagents \
  --playbook "$root/examples/cluster/tasks.yaml" --json >"$work/tasks.json"
antler status
cat "$work/example.json" "$work/tasks.json"
python3 -c '
import json, sys
runs = [json.load(open(f)) for f in sys.argv[1:]]
print(json.dumps(runs))
sys.exit(0 if all(r["status"] == "success" for r in runs) else 1)' "$work/example.json" "$work/tasks.json"
