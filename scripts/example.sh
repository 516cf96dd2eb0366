#!/usr/bin/env bash
# Antler's main job on a fresh machine: installs what the example needs (bubblewrap, the
# MCP "everything" server from npm, pinned under tests/), builds the release binaries, and
# runs the bundled example (examples/report) end to end, offline, with the scripted model:
# tool_search finds an MCP tool of a real server, the run calls it, writes a report in the
# bubblewrap sandbox, presents it, and settles as delivered. Extra arguments go to
# `antler run` (e.g. --trace).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
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

cargo build --release --workspace --bins

export PATH="$root/tests/node_modules/.bin:$PATH"
work=$(mktemp -d /tmp/antler-example.XXXXXX)
chmod 755 "$work"
cd "$root/examples/report"
echo "antler: running examples/report (files under $work)" >&2
ANTLER_EXTENSIONS_CONFIG_PATH=$PWD/extensions_config.json \
ANTLER_SANDBOX_BASE_DIR=$work/base \
ANTLER_GATEWAY_ADDR=off RUST_LOG=${RUST_LOG:-warn} \
  "$root/target/release/antler" --runtime-dir "$work/run" \
  run "Write a short report on what the everything server's echo tool answers" \
  --playbook playbook.yaml --config config.yaml "$@"
