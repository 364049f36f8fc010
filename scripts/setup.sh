#!/usr/bin/env bash
# Creates (or refreshes) the structserve Python environment. Idempotent: with nothing
# changed it only checks stamps and returns in seconds. Called by `make serve`,
# `make test`, .ci/run and the Dockerfile.
#
#   STRUCTSERVE_VENV   where the venv lives (default: ~/.cache/structserve-env/<hash of
#                      requirements>); .venv in the repo is a symlink to it.
#   PYTHON             the interpreter to build it from (default: python3.11, else python3)
#   STRUCTSERVE_SETUP_DEPS_ONLY=1  stop before installing the project itself (the Dockerfile's
#                      dependency layer, cached while only the code changes)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
log() { printf '[setup] %s\n' "$*" >&2; }

python_bin="${PYTHON:-$(command -v python3.11 || command -v python3)}"
"$python_bin" - <<'PY' || { echo "[setup] structserve needs Python >= 3.11" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else 1)
PY

req_hash="$(cat requirements/*.txt | sha256sum | cut -c1-12)"
venv="${STRUCTSERVE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/structserve-env/$req_hash}"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# pip on these machines warns about every missing local index folder; keep real errors.
# sglang is installed with --no-deps on purpose: its CUDA-only dependencies (flash-attn, flashinfer,
# deep-gemm, cuda-python...) are never installed here, so pip's resolver lists each of them as
# "sglang X requires Y, which is not installed" under an "ERROR: pip's dependency resolver" header.
# Those expected lines are counted and summarized once; any other line (a real failure) prints in full.
pip_filter() {
  awk '/is ignored: it is neither a file nor a directory/ { next }
       /^ERROR: pip.s dependency resolver does not currently take into account/ { next }
       /^sglang [^ ]+ requires .*, which is not installed\.$/ { skipped++; next }
       { print }
       END { if (skipped) printf "[setup] sglang is installed without its %d CUDA-only dependencies (deliberate: --no-deps)\n", skipped > "/dev/stderr" }'
}
pipq() { "${pip[@]}" "$@" 2>&1 | pip_filter; return "${PIPESTATUS[0]}"; }

if [ ! -x "$venv/bin/python" ]; then
  log "creating venv $venv"
  mkdir -p "$(dirname "$venv")"
  "$python_bin" -m venv "$venv"
fi

stamp="$venv/.structserve-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "$req_hash" ]; then
  log "installing torch (requirements/torch.txt)"
  pipq install -r requirements/torch.txt
  log "installing sglang --no-deps (requirements/sglang.txt)"
  pipq install --no-deps -r requirements/sglang.txt
  log "installing pinned runtime + test packages"
  pipq install -r requirements/runtime.txt -r requirements/test.txt
  echo "$req_hash" >"$stamp"
fi

# sgl_kernel: a real build always wins; the pure-torch shim only when none imports.
shim_version="$(sed -n 's/^version = "\(.*\)"/\1/p' shims/sgl_kernel_cpu_shim/pyproject.toml)"
kernel_state="$("$venv/bin/python" - <<'PY' 2>/dev/null || echo missing
import sgl_kernel
print("shim:" + sgl_kernel.__version__ if getattr(sgl_kernel, "IS_STRUCTSERVE_SHIM", False) else "real")
PY
)"
if [ "$kernel_state" = "missing" ] || { [[ "$kernel_state" == shim:* ]] && [ "$kernel_state" != "shim:$shim_version+structserve.shim" ]; }; then
  log "no real sgl_kernel: installing (or updating) the pure-torch CPU shim"
  pipq install --no-deps --force-reinstall ./shims/sgl_kernel_cpu_shim
fi

if [ -n "${STRUCTSERVE_SETUP_DEPS_ONLY:-}" ]; then
  log "dependencies ready: $venv"
  exit 0
fi

# The project itself, editable, re-done when the checkout moved or pyproject changed.
proj_key="$root:$(sha256sum pyproject.toml | cut -c1-12)"
if [ "$(cat "$venv/.structserve-project" 2>/dev/null)" != "$proj_key" ]; then
  log "installing structserve (editable) from $root"
  pipq install --no-deps --no-build-isolation -e .
  echo "$proj_key" >"$venv/.structserve-project"
fi

ln -sfn "$venv" "$root/.venv"
log "environment ready: $venv"
