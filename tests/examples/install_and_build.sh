#!/usr/bin/env bash
# Installs tapegrad from the build into a temporary root, then builds examples/char_mlp as a
# separate project against it through pkg-config, runs it, and checks its loss fell.
set -euo pipefail
BUILD=$1 SOURCE=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$BUILD" --destdir "$root/dest" --no-rebuild --quiet > "$root/install.log"
pc=$(find "$root/dest" -name tapegrad.pc | head -n 1)
[[ -n "$pc" ]] || { echo "FAIL: meson install put no tapegrad.pc in place"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR="$root/dest"
echo "installed: $(pkg-config --modversion tapegrad) ($(pkg-config --cflags tapegrad))"
meson setup "$root/example" "$SOURCE/examples/char_mlp" > "$root/setup.log" || { cat "$root/setup.log"; exit 1; }
ninja -C "$root/example" > "$root/ninja.log" || { cat "$root/ninja.log"; exit 1; }
LD_LIBRARY_PATH="$libdir" "$root/example/char_mlp"
echo "1 passed, 0 failed"
