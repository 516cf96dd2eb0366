#!/usr/bin/env bash
# Runs Antler's test suites on a fresh machine: installs the real peers the suites talk to
# (system packages, pinned npm and pip packages under tests/), builds every binary, runs
# every test. Idempotent: a second run skips what is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
# llama-cpp-python (tests/requirements.txt) builds llama.cpp with cmake.
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
fi

if [ -f tests/package.json ]; then
  (cd tests && if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error; else npm install --no-audit --no-fund --loglevel=error; fi)
fi
if [ -f tests/requirements.txt ]; then
  python3 -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
fi

cargo build --workspace --bins
cargo test --workspace "$@"
