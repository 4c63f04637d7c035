#!/usr/bin/env bash
# The GPU tests (tests/gpu) on a CUDA machine, from the repository's root, with the machine's own python3
# (torch with CUDA) and no install of treespec: the folders are imported through .mypy/treespec's links.
#   bash tests/gpu/run.sh [pytest args: test paths and options, in place of tests/gpu]
# Wheels of what that python lacks may lie in .whl/ (installed into /tmp/treespec-site first); the
# tokenizer of the bundled model, which the training tests use, comes from $TREESPEC_MODELS_DIR
# (default: ~/.cache/treespec/models). With $OUT set, the log and a JUnit report are written there.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
SITE=/tmp/treespec-site
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
  export PYTHONPATH="$SITE:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD/.mypy:$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
# The CPU kernels (the CPU side of the parity tests) build once per machine: start it beside the GPU tests.
"$PYTHON" -c "from treespec.kernels.cpu_extension import load_cpu_kernels; load_cpu_kernels()" &
LOG=${OUT:-/tmp}/gpu-tests.log
REPORT=${OUT:-/tmp}/gpu-tests.xml
"$PYTHON" -m pytest --run-gpu -p no:cacheprovider -ra --junitxml "$REPORT" "${@:-tests/gpu}" 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
wait
exit "$status"
