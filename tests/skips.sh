# Sourced by the test scripts that need an optional tool: each function either sets what the
# script needs or prints one SKIP line and exits 77 (meson's SKIP). scripts/test.sh installs every
# tool (scripts/deps.sh), so these skip only where the README's test command was not used.

# python: a Python that imports torch (Debian's python3-torch is under /usr/bin/python3; a python3
# earlier on PATH, such as a pyenv shim, may lack it).   need_torch WHAT
need_torch() {
  python=
  local p
  for p in /usr/bin/python3 python3; do
    if command -v "$p" > /dev/null 2>&1 && "$p" -c 'import torch' > /dev/null 2>&1; then
      python=$p
      return
    fi
  done
  echo "SKIP: $1: python3-torch is not installed (apt-get install python3-torch)"
  exit 77
}

# Headless Chromium through playwright-core (tests/tape/browser/node_modules).   need_browser WHAT
need_browser() {
  browser_modules=$(cd "$(dirname "${BASH_SOURCE[0]}")/tape/browser" && pwd)/node_modules
  if [[ ! -x /usr/bin/chromium ]]; then
    echo "SKIP: /usr/bin/chromium is missing (apt-get install chromium), so $1 is not loaded"
    exit 77
  fi
  if ! command -v node > /dev/null; then
    echo "SKIP: node is missing (apt-get install npm), so $1 is not loaded"
    exit 77
  fi
  if [[ ! -d $browser_modules/playwright-core ]]; then
    echo "SKIP: playwright-core is not installed (cd tests/tape/browser && npm ci), so $1 is not loaded"
    exit 77
  fi
}
