#!/usr/bin/env bash
# The tape page in headless Chromium (page_test.mjs does the stepping and the checks). Given
# gpt_dump too, the pages of a GPT's training step (gpt_page_test.mjs: grouping, search, a DOM of a
# few hundred elements at any size; the load time is printed). Skips (exit 77, one line) when chromium, node or the test's
# node_modules are missing; .ci/run installs chromium and runs `npm ci` in tests/tape/browser first.
#
#   page_test.sh TAPE TINY_STEP SCREENSHOT.png [GPT_DUMP GPT_SCREENSHOT.png]
set -u
TAPE=$1 TINY=$2 SHOT=$3 GPT=${4:-} GPT_SHOT=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../skips.sh"
need_browser "the page"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$TINY" --dump-tape "$work/good.json" > /dev/null || exit 1
"$TINY" --overwrite-bug --dump-tape "$work/bad.json" > /dev/null || exit 1
"$TAPE" html "$work/good.json" "$work/bad.json" -o "$work/pair.html" 2> /dev/null || exit 1
"$TAPE" html "$work/good.json" -o "$work/single.html" 2> /dev/null || exit 1
node "$here/browser/page_test.mjs" "$work/pair.html" "$work/single.html" "$SHOT" || exit 1
[[ -n $GPT ]] || exit 0
"$GPT" "$work/gpt.json" > /dev/null || exit 1
"$GPT" "$work/big.json" 500 2 8 16 2 > /dev/null || exit 1
"$TAPE" html "$work/gpt.json" -o "$work/gpt.html" 2> /dev/null || exit 1
"$TAPE" html "$work/big.json" -o "$work/big.html" 2> /dev/null || exit 1
exec node "$here/browser/gpt_page_test.mjs" "$work/gpt.html" "$work/big.html" "$GPT_SHOT"
