#!/usr/bin/env bash
# The device check: one table of what a first run on a GPU or TPU must show (tests/device/check.py).
#
#   bash tests/device/check.sh [--small] [--json FILE] [--parts quickstart,flax,gpt,vmapped]
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

DEPS_DIR="${HARNESS_DEVICE_DEPS:-${TMPDIR:-/tmp}/harness-device-deps}"  # a TPU host's installs (below)
[ -d "$DEPS_DIR" ] && export PYTHONPATH="$PYTHONPATH:$DEPS_DIR"

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
elif ! "$PY" -c "import harness, flax, optax, mlflow" >/dev/null 2>&1 && [ ! -e "$DEPS_DIR/.tried" ]; then
  if [ "$platform" = tpu ]; then
    # Keep the TPU's own jax/jaxlib/libtpu: the project's other pinned dependencies only, into a
    # folder put last on PYTHONPATH (the project itself is on it already). From PyPI, or on an
    # offline machine from the index that PIP_INDEX_URL / PIP_FIND_LINKS name; what cannot be had
    # pinned is tried unpinned, and what cannot be had at all is named (the parts that need it fail
    # in the table, the others run).
    echo "device check: installing the project's dependencies beside this machine's JAX into $DEPS_DIR"
    # one pip call; a requirement the index lacks is retried unpinned, then left out and named
    "$PY" - "$DEPS_DIR" <<'PYEOF' || true
import re, subprocess, sys, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
reqs = [r for r in p["dependencies"] + p.get("optional-dependencies", {}).get("dev", [])
        if not re.match(r"(jax(lib)?|torch)\b", r)]
name = lambda r: re.split(r"[<>=!~;\[ ]", r, 1)[0].lower().replace("_", "-")
left_out = []
for _ in range(2 * len(reqs)):
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--only-binary=:all:", "--target", sys.argv[1], *reqs], capture_output=True, text=True)
    bad = re.search(r"No matching distribution found for (\S+)", r.stderr)
    if r.returncode == 0 or not bad:
        print(r.stderr.strip()[-600:] if r.returncode else "device check: installed", flush=True)
        break
    for i, q in enumerate(reqs):
        if name(q) == name(bad.group(1)):
            reqs[i:i + 1] = [] if q == name(q) else [name(q)]
            left_out += [q] if q == name(q) else []
            break
    else:
        print(f"device check: a dependency's own requirement is missing: {bad.group(1)}")
        break
print(f"device check: not installed (the parts that need them fail): {' '.join(left_out) or 'none'}")
PYEOF
    mkdir -p "$DEPS_DIR" && touch "$DEPS_DIR/.tried"  # tried once: a second run on this machine does not try again
    case ":$PYTHONPATH:" in *":$DEPS_DIR:"*) ;; *) export PYTHONPATH="$PYTHONPATH:$DEPS_DIR" ;; esac
  else
    "$PY" -m pip install -q -e ".[dev]"
  fi
fi
echo "device check: platform $platform"
exec "$PY" tests/device/check.py "$@"
