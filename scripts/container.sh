#!/usr/bin/env bash
# Build and run the structserve image with podman on machines without a Docker engine or an
# image registry (the recipe of docs/deployment.md; used by tests/deploy/test_container.py).
#
#   scripts/container.sh build [TAG]            build the CPU image (default localhost/structserve:cpu)
#   scripts/container.sh run NAME PORT [ARGS]   start it detached on 127.0.0.1:PORT (ARGS: more podman
#                                               run options, e.g. -v, -e), host network
#   scripts/container.sh gateway NAME PORT URL... SGLang's gateway (smg, in the same image) on
#                                               127.0.0.1:PORT in front of the replicas at URL...
#
# Idempotent: podman, runc, debootstrap and nginx are installed when missing (apt, root), the
# Debian base image is made once (debootstrap + import), and podman's layer cache makes a
# rebuild with unchanged requirements take seconds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[container] %s\n' "$*" >&2; }
BASE=localhost/debian-base:bookworm
RUN_OPTS=(--runtime runc --cgroup-manager=cgroupfs)

ensure_tools() {
  local missing=()
  for tool in podman runc debootstrap nginx; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing podman runc debootstrap nginx-light (missing: ${missing[*]})"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap nginx-light >/dev/null
  fi
}

ensure_base() {
  podman image exists "$BASE" && return 0
  local rootfs; rootfs="$(mktemp -d)"
  log "debootstrap bookworm (minbase) -> $BASE"
  debootstrap --variant=minbase bookworm "$rootfs" >/dev/null
  tar -C "$rootfs" -c . | podman import - "$BASE" >/dev/null
  rm -rf "$rootfs"
}

# A build needs about 25 GB free (the dependency layer is ~7 GB, held twice while podman commits
# it). Reclaimed first: what an interrupted build left (/var/tmp copies, buildah working
# containers) and, when space is still short, every image but the Debian base (the build then
# starts over: ~11 minutes). Untagged images are not pruned otherwise: the dependency stage's image
# is one of them, and it is the layer cache.
NEED_GB=25
reclaim() {
  if ! pgrep -x podman >/dev/null && ! pgrep -x buildah >/dev/null; then
    find /var/tmp -maxdepth 1 \( -name 'buildah[0-9]*' -o -name 'storage[0-9]*' \) -exec rm -rf {} +
    # and its working containers, one per step, each holding its layer (GBs for the venv steps)
    podman ps -a --external --format '{{.ID}} {{.Names}}' | awk '$2 ~ /-working-container/ {print $1}' \
      | xargs -r podman rm -f >/dev/null 2>&1 || true
  fi
  local free; free="$(df --output=avail -BG /var/lib/containers 2>/dev/null | tail -1 | tr -dc 0-9)"
  if [ -n "$free" ] && [ "$free" -lt "$NEED_GB" ]; then
    log "${free} GB free (< ${NEED_GB}): removing the cached layers of earlier builds"
    podman images -a --format '{{.ID}} {{.Repository}}:{{.Tag}}' | awk -v base="$BASE" '$2 != base {print $1}' \
      | xargs -r podman rmi -f >/dev/null 2>&1 || true
  fi
}

build() {
  local tag="${1:-localhost/structserve:cpu}" args=() ca
  ca="$(python3 -c 'import ssl; print(ssl.get_default_verify_paths().cafile or "")' 2>/dev/null || true)"
  ca="${PIP_CERT:-${ca:-/etc/ssl/certs/ca-certificates.crt}}"
  [ -f "$ca" ] && args+=(-v "$ca:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
  if [ -n "${PIP_FIND_LINKS:-}" ] && [ -d "$PIP_FIND_LINKS" ]; then
    args+=(-v "$PIP_FIND_LINKS:/run/wheels:ro" --build-arg PIP_FIND_LINKS=/run/wheels)
  fi
  log "podman build $tag (base $BASE)"
  podman build --format docker --isolation chroot --network host --ulimit nofile=1024:1024 --layers \
    --build-arg BASE_IMAGE="$BASE" "${args[@]}" -t "$tag" "$root"
}

run() {
  local name="$1" port="$2"; shift 2
  podman rm -f "$name" >/dev/null 2>&1 || true
  podman "${RUN_OPTS[@]}" run -d --name "$name" --network host \
    --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
    -e STRUCTSERVE_PORT="$port" -e STRUCTSERVE_HOST=127.0.0.1 "$@" "${TAG:-localhost/structserve:cpu}"
}

# The flags of deploy/compose.yaml's gateway (and tests/fronts.py): cache-aware routing, readiness
# from /ready every second, so a draining or loading replica leaves the rotation.
gateway() {
  local name="$1" port="$2"; shift 2
  podman rm -f "$name" >/dev/null 2>&1 || true
  podman "${RUN_OPTS[@]}" run -d --name "$name" --network host --no-healthcheck \
    --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --entrypoint /opt/gateway/bin/smg \
    "${TAG:-localhost/structserve:cpu}" launch --host 127.0.0.1 --port "$port" --worker-urls "$@" \
    --policy cache_aware --health-check-endpoint /ready --health-check-interval-secs 1 \
    --health-failure-threshold 1 --health-success-threshold 1 --worker-startup-check-interval 1 \
    --disable-tokenizer-autoload --prometheus-host 127.0.0.1 --prometheus-port "$((port + 1))"
}

cmd="${1:-build}"; shift || true
case "$cmd" in
  build) ensure_tools; ensure_base; reclaim; build "$@" ;;
  run) run "$@" ;;
  gateway) gateway "$@" ;;
  *) echo "usage: $0 build [TAG] | run NAME PORT [podman run options] | gateway NAME PORT URL..." >&2; exit 2 ;;
esac
