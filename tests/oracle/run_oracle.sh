#!/usr/bin/env bash
# The oracle test: run_oracle.sh DRIVER COMPARE.PY OUT.jsonl
# Finds a Python that imports torch (Debian's python3-torch is under /usr/bin/python3; a python3
# earlier on PATH, such as a pyenv shim, may lack it), runs the driver, then compares in torch.
# Exits 77 (meson's SKIP) when no Python imports torch.
set -uo pipefail
driver=$1 compare=$2 runs=$3
python=
for p in /usr/bin/python3 python3; do
  if command -v "$p" > /dev/null 2>&1 && "$p" -c 'import torch' > /dev/null 2>&1; then
    python=$p
    break
  fi
done
if [[ -z $python ]]; then
  echo "SKIP: oracle: python3-torch is not installed (apt-get install python3-torch)"
  exit 77
fi
"$driver" "$runs" || exit 1
exec "$python" "$compare" "$runs"
