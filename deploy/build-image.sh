#!/usr/bin/env bash
# Builds Antler's container image offline, from scratch, with buildah: no registry but
# Debian's mirror (deb.debian.org) and, for the upload converters only, PyPI (below). mmdebstrap lays Debian bookworm into an empty
# container, the four binaries go to /usr/local/bin, and the result is committed under a
# tag (antler:0.1.0, the name the manifests in deploy/base use). The same image as
# deploy/Containerfile's runtime stage, for machines that reach no container registry.
#
#   deploy/build-image.sh [--tag NAME] [--output oci-archive:PATH] [--packages "a b c"]
#                         [--no-cache] [--no-converters]
#
# ANTLER_BIN_DIR names a directory holding the binaries (antler, antler-mcp-host,
# antler-sandbox-host, antler-subagent); without it, the script runs
# `cargo build --release --locked --workspace --bins` and takes target/release.
# ANTLER_DEBIAN_MIRROR overrides the mirror.
#
# The upload converters (docs/uploads.md: pymupdf4llm, MarkItDown and the lxml it needs) run
# INSIDE the sandboxes, whose python3 is the image's system python under the read-only /usr:
# the lines of tests/requirements.txt marked `# sandbox` are pip-installed into it (into
# /usr/local, as scripts/test.sh does for /usr/bin/python3). That one step reaches PyPI, or
# the index ANTLER_PIP_INDEX_URL names (a mirror, for a machine that reaches none);
# --no-converters leaves it out, as does a --packages set without python3. Runs as root (mmdebstrap chroots, buildah
# mounts); installs buildah, mmdebstrap and runc with apt when they are missing.
#
# The Debian root is kept as an image of its own (localhost/antler-base:<hash of suite,
# mirror and packages>), so a rebuild with new binaries takes seconds; --no-cache lays a
# fresh one (for Debian's security updates). A rebuild moves the tag to the new image and
# removes the image it replaced. The working container is removed on exit, on failure and
# on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

suite=bookworm
mirror=${ANTLER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
tag=antler:0.1.0
output=
cache=1
converters=1
# What the processes start, as in deploy/Containerfile: bubblewrap (sandbox-host's
# sandboxes), nodejs/npm and python3 (stdio MCP servers that mcp-host spawns: npx, python
# -m), ca-certificates (TLS to models, MCP servers, web tools), tini (pid 1).
# python3-pip installs the upload converters (below).
packages="bubblewrap ca-certificates tini python3 python3-venv python3-pip nodejs npm"
binaries=(antler antler-mcp-host antler-sandbox-host antler-subagent)

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    --packages) packages=$2; shift 2 ;;
    --no-cache) cache=0; shift ;;
    --no-converters) converters=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $output in
  ''|oci-archive:*) ;;
  *) echo "build-image.sh: --output takes oci-archive:PATH, not $output" >&2; exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then
  echo "build-image.sh: run as root (mmdebstrap chroots into the new root, buildah mounts it)" >&2
  exit 1
fi
log() { echo "build-image.sh: $*" >&2; }

need_apt=()
command -v buildah >/dev/null 2>&1 || need_apt+=(buildah)
command -v mmdebstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
# podman runs the image; runc, because crun refuses to start containers on hosts with
# cgroups in hybrid mode (v1 controllers with a v2 hierarchy mounted beside them).
command -v podman >/dev/null 2>&1 || need_apt+=(podman)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ -n "${ANTLER_BIN_DIR:-}" ]; then
  bin_dir=$ANTLER_BIN_DIR
else
  log "building the release binaries"
  cargo build --release --locked --workspace --bins
  bin_dir=target/release
fi
for b in "${binaries[@]}"; do
  if [ ! -x "$bin_dir/$b" ]; then
    echo "build-image.sh: $bin_dir/$b is missing or not executable" >&2
    exit 1
  fi
done

container=
cleanup() {
  if [ -n "$container" ]; then
    buildah umount "$container" >/dev/null 2>&1 || true
    buildah rm "$container" >/dev/null 2>&1 || true
    container=
  fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# The upload converters' pins (`name==version  # sandbox`), when the image has a python3.
pins=
if [ $converters = 1 ] && [[ " $packages " == *" python3 "* ]]; then
  pins=$(grep -E '# sandbox$' tests/requirements.txt | sed -E 's/ *#.*$//' | tr '\n' ' ')
  if [ -z "${pins// /}" ]; then
    echo "build-image.sh: tests/requirements.txt marks no line '# sandbox' (the upload converters)" >&2
    exit 1
  fi
  if [[ " $packages " != *" python3-pip "* ]]; then
    packages="$packages python3-pip"
  fi
elif [ $converters = 1 ]; then
  log "no python3 in --packages: the upload converters are left out"
fi
pip_index=${ANTLER_PIP_INDEX_URL:-}

# The base: Debian's root with the runtime packages, the upload converters, Antler's user
# and state directory.
base_id=$(printf '%s\n' "$suite" "$mirror" "$packages" "$pins" "$pip_index" "$(sed -n '/^# base:begin/,/^# base:end/p' "$0")" |
  sha256sum | cut -c1-16)
base=localhost/antler-base:$suite-$base_id
if [ $cache = 1 ] && buildah inspect --type image "$base" >/dev/null 2>&1; then
  log "reusing $base"
else
# base:begin
  log "laying Debian $suite from $mirror into $base: $packages"
  container=$(buildah from scratch)
  root=$(buildah mount "$container")
  # The apt variant is Essential plus apt (debootstrap's minbase without the required-but-
  # not-essential tools), so an image built on this one can still apt-get install. Docs,
  # man pages and locales are left out, as in Debian's slim images. dpkg does not fsync
  # each file: a build that dies is thrown away whole.
  mmdebstrap --quiet --variant=apt --include="${packages// /,}" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='force-unsafe-io' \
    "$suite" "$root" "$mirror"
  if [ -n "$pins" ]; then
    # Into the image's system python (its /usr/local), resolving names with the build
    # machine's resolver for this one step; no pip cache is left in the image.
    log "installing the upload converters into the image's python3: $pins"
    cp -L /etc/resolv.conf "$root/etc/resolv.conf"
    # shellcheck disable=SC2086 # the pins are words
    chroot "$root" env ${pip_index:+PIP_INDEX_URL=$pip_index} \
      python3 -m pip install --quiet --disable-pip-version-check --no-cache-dir \
      --break-system-packages $pins
    rm -f "$root/etc/resolv.conf"
    # The converters answer as the sandbox will call them (convert.py's imports).
    chroot "$root" python3 -c 'import pymupdf4llm, markitdown, lxml'
  fi
  # The non-root user of the lead, mcp-host and the workers (the manifests run them as
  # 10001). sandbox-host runs as root and starts bubblewrap as nobody (65534).
  echo 'antler:x:10001:10001:Antler:/home/antler:/usr/sbin/nologin' >>"$root/etc/passwd"
  echo 'antler:x:10001:' >>"$root/etc/group"
  echo 'antler:!:19000::::::' >>"$root/etc/shadow"
  install -d -o 10001 -g 10001 -m 0755 "$root/home/antler"
  # 0711: sandbox-host runs bubblewrap as nobody, which must pass through here to the
  # thread directories under /var/lib/antler/threads.
  install -d -o 10001 -g 10001 -m 0711 "$root/var/lib/antler"
  buildah umount "$container" >/dev/null
  buildah commit --quiet --rm "$container" "$base" >/dev/null
  container=
# base:end
fi

container=$(buildah from "$base")
root=$(buildah mount "$container")
install -m 0755 -t "$root/usr/local/bin" "${binaries[@]/#/$bin_dir/}"
# Each binary must find its libraries in the image's glibc, not the build machine's.
for b in "${binaries[@]}"; do
  libs=$(chroot "$root" /usr/bin/ldd "/usr/local/bin/$b")
  if grep -q 'not found' <<<"$libs"; then
    echo "build-image.sh: /usr/local/bin/$b does not find its libraries in the image:" >&2
    echo "$libs" >&2
    exit 1
  fi
  chroot "$root" "/usr/local/bin/$b" --version >/dev/null
done
version=$(chroot "$root" /usr/local/bin/antler --version)
buildah umount "$container" >/dev/null
# tini reaps the children that stdio MCP servers and sandboxes leave and forwards SIGTERM,
# so a pod's stop drains the process (each binary drains on SIGTERM).
buildah config \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env HOME=/home/antler --env RUST_LOG=info \
  --user 10001:10001 --workingdir /home/antler \
  --entrypoint '["/usr/bin/tini", "--"]' --cmd '["antler", "--help"]' \
  --label org.opencontainers.image.title=antler \
  --label "org.opencontainers.image.version=${version##* }" \
  "$container"
previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$tag" 2>/dev/null || true)
image=$(buildah commit --quiet --rm "$container" "$tag")
container=
if [ -n "$previous" ] && [ "$previous" != "$image" ]; then
  buildah rmi "$previous" >/dev/null 2>&1 || true
fi
log "built $tag ($image, $version)"
if [ -n "$output" ]; then
  rm -f "${output#oci-archive:}"
  buildah push --quiet "$tag" "$output"
  log "wrote ${output#oci-archive:}"
fi
