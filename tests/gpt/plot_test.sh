#!/usr/bin/env bash
# gpt's loss plot in headless Chromium (plot_test.mjs has the checks): a 60-step run with --log,
# then its SVG opened as a page. Skips (77, one line) where chromium, node or playwright-core
# (installed in tests/tape/browser by scripts/deps.sh) are missing.
#   plot_test.sh GPT PLOT_TEST.MJS WORKDIR
set -u
gpt=$1 script=$2 work=$3
browser=$(cd "$(dirname "$0")/../tape/browser" && pwd)
if [[ ! -x /usr/bin/chromium ]]; then
  echo "SKIP: /usr/bin/chromium is missing (apt-get install chromium), so the plot is not loaded"
  exit 77
fi
if ! command -v node > /dev/null; then
  echo "SKIP: node is missing (apt-get install npm), so the plot is not loaded"
  exit 77
fi
if [[ ! -d $browser/node_modules/playwright-core ]]; then
  echo "SKIP: playwright-core is not installed (cd tests/tape/browser && npm ci), so the plot is not loaded"
  exit 77
fi
rm -f "$work/plot.csv" "$work/plot.svg"
"$gpt" train --steps 60 --log "$work/plot.csv" > "$work/plot.log" || exit 1
exec node "$script" "$browser/node_modules/playwright-core" "$work/plot.svg" "$work/plot.csv" "$work/plot.png"
