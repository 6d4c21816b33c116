#!/usr/bin/env bash
# gpt's loss plot in headless Chromium (plot_test.mjs has the checks): a 60-step run with --log,
# then its SVG opened as a page. Skips (77, one line) where chromium, node or playwright-core
# (installed in tests/tape/browser by scripts/deps.sh) are missing.
#   plot_test.sh GPT PLOT_TEST.MJS WORKDIR
set -u
gpt=$1 script=$2 work=$3
source "$(dirname "$0")/../skips.sh"
need_browser "the plot"  # sets $browser_modules
rm -f "$work/plot.csv" "$work/plot.svg"
"$gpt" train --steps 60 --log "$work/plot.csv" > "$work/plot.log" || exit 1
exec node "$script" "$browser_modules/playwright-core" "$work/plot.svg" "$work/plot.csv" "$work/plot.png"
