#!/usr/bin/env bash
# Debian's redis-server, which the tests of the shared response store (responses.store: redis)
# start on a free loopback port (tests/redis_server.py). Idempotent: apt runs only when the
# binary is missing (root). `make redis`; `make test` runs it.
set -euo pipefail
command -v redis-server >/dev/null && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "[setup] redis-server is missing: install Debian's redis-server package (apt-get install redis-server)" >&2
  exit 1
fi
printf '[setup] installing redis-server (Debian package)\n' >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
redis-server --version >&2
