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
# inspector_page.rs drives the run inspector in headless Chromium.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# deploy_manifests: `kubectl kustomize` builds the overlays offline.
command -v kubectl >/dev/null 2>&1 || need_apt+=(kubectl)
# sandbox_limits: keyctl tries the kernel's keyrings from inside a sandbox.
command -v keyctl >/dev/null 2>&1 || need_apt+=(keyutils)
# cluster_multihost: network namespaces and veth links.
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
# deploy_image: deploy/build-image.sh builds the image with buildah and mmdebstrap; podman
# runs it with runc (crun refuses hosts whose cgroups are in hybrid mode).
command -v buildah >/dev/null 2>&1 || need_apt+=(buildah)
command -v mmdebstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
command -v podman >/dev/null 2>&1 || need_apt+=(podman)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
# ha_leases: a throwaway PostgreSQL cluster (tests/tests/pg_support). The major version is
# pinned by Debian's package name; an exact version pin would break at the next point release.
[ -x /usr/lib/postgresql/15/bin/postgres ] || need_apt+=(postgresql-15)
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
  # llama.cpp is built for a portable x86-64 (AVX2), not with -march=native: a VM may
  # advertise AMX or AVX-512 that its kernel does not enable, and the model server then dies
  # of a protection fault at its first completion. No wheel cache: a cached native build
  # would be reused otherwise.
  if ! python3 -c "import llama_cpp" >/dev/null 2>&1; then
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
      python3 -m pip install --quiet --disable-pip-version-check --no-cache-dir \
      "$(grep -E '^llama-cpp-python' tests/requirements.txt)"
  fi
  python3 -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
  # The upload converters run inside the sandbox, whose python3 is the system's under the
  # read-only /usr: install the `# sandbox` pins for it too (into /usr/local).
  if grep -qE '# sandbox$' tests/requirements.txt && [ -x /usr/bin/python3 ]; then
    if ! /usr/bin/python3 -m pip --version >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ]; then apt-get install -y -qq python3-pip >/dev/null; else sudo apt-get install -y -qq python3-pip >/dev/null; fi
    fi
    grep -E '# sandbox$' tests/requirements.txt | sed -E 's/ *#.*$//' \
      | xargs /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --break-system-packages
  fi
  # The LangGraph harness's MCP adapters need the MCP SDK 1.x, the suites' driver 2.x: the
  # `#harness-venv` pins go into a venv of their own that sees the packages above (pip's
  # warning that mcp-server-time, seen there, wants mcp 2 is beside the point: not shown).
  if grep -qE '^#harness-venv ' tests/requirements.txt; then
    if [ ! -x tests/.venv-harness/bin/python ]; then
      python3 -m venv --system-site-packages tests/.venv-harness
      echo '*' > tests/.venv-harness/.gitignore
    fi
    grep -E '^#harness-venv ' tests/requirements.txt | sed -E 's/^#harness-venv +//' \
      | xargs tests/.venv-harness/bin/python -m pip install --quiet --disable-pip-version-check --no-warn-conflicts
  fi
fi

cargo build --workspace --bins

# Every process the suites start must end with them: after the tests, anything still running
# from this checkout's binaries or peers (a host, an MCP server, the model server) or a
# sandbox (bubblewrap and its init run `sandbox-host __supervise`) is an orphan, and the run fails (after killing them, so nothing lingers).
leftovers() {
  ps -eo pid=,args= | grep -F -e "$PWD/target/" -e "$PWD/tests/node_modules/" -e "$PWD/tests/peers/" -e "llama_cpp.server" -e "sandbox-host __supervise" \
    | grep -v -e "grep -F" -e "ps -eo" || true
}
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?
for _ in $(seq 50); do
  [ -z "$(leftovers)" ] && break
  sleep 0.2
done
left=$(leftovers)
if [ -n "$left" ]; then
  echo "test.sh: these processes outlived the test suite (orphans):" >&2
  echo "$left" | cut -c1-200 >&2
  echo "$left" | awk '{print $1}' | xargs -r kill -9 2>/dev/null || true
  status=1
fi
exit $status
