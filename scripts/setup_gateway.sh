#!/usr/bin/env bash
# Creates (or refreshes) the gateway's own venv: SGLang's model gateway (smg, pinned in
# requirements/optional/gateway.txt), kept apart from the serving environment (it brings grpcio
# and protobuf, which the engine does not need). Idempotent; .venv-gateway links to it.
#
#   STRUCTSERVE_GATEWAY_VENV  where it lives (default ~/.cache/structserve-gateway/<hash>)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
req=requirements/optional/gateway.txt
hash="$(sha256sum "$req" | cut -c1-12)"
venv="${STRUCTSERVE_GATEWAY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/structserve-gateway/$hash}"
python_bin="${PYTHON:-$(command -v python3.11 || command -v python3)}"

if [ "$(cat "$venv/.structserve-gateway" 2>/dev/null)" != "$hash" ]; then
  printf '[setup] gateway venv %s (%s)\n' "$venv" "$req" >&2
  [ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
  "$venv/bin/python" -m pip --disable-pip-version-check -q install -r "$req" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  "$venv/bin/smg" --version >/dev/null
  echo "$hash" >"$venv/.structserve-gateway"
fi
ln -sfn "$venv" "$root/.venv-gateway"
