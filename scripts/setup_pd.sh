#!/usr/bin/env bash
# Prefill/decode disaggregation on this CPU (docs/scale-out.md): installs the CUDA-free Mooncake
# transfer engine (pinned in requirements/optional/pd.txt) into the serving venv, and the
# Debian libraries its engine.so links (apt, only when missing; root). Idempotent: a second run
# only checks that `mooncake.engine` loads (about a second). `make pd`; `make test` runs it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${STRUCTSERVE_VENV:-.venv}/bin/python"  # the image installs into /opt/venv
libs=(libibverbs1 libnl-3-200 libnl-route-3-200 libnuma1 libcurl4)

missing=()
for lib in "${libs[@]}"; do
  dpkg-query -W -f='${Status}' "$lib" 2>/dev/null | grep -q "install ok installed" || missing+=("$lib")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "[setup] missing Debian libraries for Mooncake: ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 1
  fi
  printf '[setup] installing %s (Debian packages)\n' "${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

pin="$(grep -v '^#' requirements/optional/pd.txt | grep -m1 .)"
have="$("$py" -m pip --disable-pip-version-check show mooncake-transfer-engine-non-cuda 2>/dev/null \
  | sed -n "s/^Version: //p" || true)"
if [ "mooncake-transfer-engine-non-cuda==$have" != "$pin" ]; then
  printf '[setup] installing %s\n' "$pin" >&2
  "$py" -m pip --disable-pip-version-check -q install "$pin" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
fi
# Verified: the transfer engine's extension loads (its shared libraries resolve).
"$py" -c "from mooncake.engine import TransferEngine; TransferEngine()" >/dev/null
