#!/usr/bin/env bash
# The device check: one table of what a first run on a GPU or TPU must show (tests/device/check.py).
#
#   bash tests/device/check.sh [--small] [--json FILE]
#
# Runs as is on a fresh machine. It detects the platform: on a GPU (nvidia-smi lists one) it installs
# the project with the CUDA build of the pinned jax (pyproject's `cuda` extra) unless JAX already sees
# the GPU; on a TPU (/dev/accel*, TPU_* variables, or JAX's backend says so) it uses the JAX installed there and
# installs nothing that would replace it; on a CPU it runs every part at small sizes. PYTHON picks the
# interpreter (default python3). Parts and columns: tests/device/check.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

backend() { "$PY" -c "import jax; print(jax.default_backend())" 2>/dev/null || echo none; }

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  platform=gpu
elif compgen -G "/dev/accel*" >/dev/null || [ -n "${TPU_NAME:-}${TPU_ACCELERATOR_TYPE:-}" ] \
     || [ "$(backend)" = tpu ]; then
  platform=tpu
else
  platform=cpu
fi

if [ "$platform" = gpu ] && [ "$(backend)" != gpu ]; then
  echo "device check: a GPU and no CUDA JAX: installing the project with the cuda extra (pinned jax)"
  "$PY" -m pip install -q -e ".[dev,cuda]"
elif ! "$PY" -c "import harness, flax, optax" >/dev/null 2>&1; then
  if [ "$platform" = tpu ]; then
    # keep the TPU's own jax/jaxlib/libtpu: the project and its other pinned dependencies only
    echo "device check: installing the project's dependencies beside this machine's JAX"
    deps=$("$PY" - <<'PYEOF'
import re, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
reqs = p["dependencies"] + p.get("optional-dependencies", {}).get("dev", [])
print(" ".join(r for r in reqs if not re.match(r"jax(lib)?\b", r)))
PYEOF
)
    # shellcheck disable=SC2086
    "$PY" -m pip install -q --no-deps -e . && "$PY" -m pip install -q $deps \
      || echo "device check: installing failed (offline?); the parts that import what is missing will fail"
  else
    "$PY" -m pip install -q -e ".[dev]"
  fi
fi
echo "device check: platform $platform"
exec "$PY" tests/device/check.py "$@"
