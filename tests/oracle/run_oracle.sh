#!/usr/bin/env bash
# The oracle test: run_oracle.sh DRIVER COMPARE.PY OUT.jsonl
# Finds a Python that imports torch (Debian's python3-torch is under /usr/bin/python3; a python3
# earlier on PATH, such as a pyenv shim, may lack it), runs the driver, then compares in torch.
# Exits 77 (meson's SKIP) when no Python imports torch.
set -uo pipefail
driver=$1 compare=$2 runs=$3
source "$(dirname "$0")/../skips.sh"
need_torch oracle  # sets $python
"$driver" "$runs" || exit 1
exec "$python" "$compare" "$runs"
