#!/usr/bin/env bash
# Installs tapegrad from the build into a temporary root (the library, its pkg-config and CMake
# packages, and the programs: tiny_step, bob, gpt, tape, value_embed), then builds each example (examples/char_mlp,
# examples/custom_op, examples/tiny_cnn, examples/attention) as a separate project against it through pkg-config, and runs
# it: char_mlp's loss must fall, custom_op's op (defined outside the tree) must pass the gradient check,
# reach the overwrite-bug mode, and dump a tape that `tape show` reads, tiny_cnn's loss must fall and
# its held-out accuracy pass 90%, attention's loss must halve, and gpt's command line pass
# tests/examples/gpt_checks.sh (training, bitwise resume, sampling, its tape, its refusals). Then builds char_mlp and gpt again with CMake through the
# installed CMake package (find_package(tapegrad)) and runs them: gpt must reach step 5.
set -euo pipefail
BUILD=$1 SOURCE=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$BUILD" --destdir "$root/dest" --no-rebuild --quiet > "$root/install.log"
pc=$(find "$root/dest" -name tapegrad.pc | head -n 1)
[[ -n "$pc" ]] || { echo "FAIL: meson install put no tapegrad.pc in place"; exit 1; }
for program in tiny_step bob gpt tape value_embed; do  # the programs (README, "Programs")
  [[ -x $(find "$root/dest" -path "*/bin/$program" | head -n 1) ]] || { echo "FAIL: meson install put no bin/$program in place"; exit 1; }
done
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR="$root/dest"
echo "installed: $(pkg-config --modversion tapegrad) ($(pkg-config --cflags tapegrad))"
passed=0
for example in char_mlp custom_op tiny_cnn attention gpt; do
  meson setup "$root/$example" "$SOURCE/examples/$example" > "$root/setup.log" || { cat "$root/setup.log"; exit 1; }
  ninja -C "$root/$example" > "$root/ninja.log" || { cat "$root/ninja.log"; exit 1; }
  echo "== $example"
  if [[ $example == custom_op ]]; then
    LD_LIBRARY_PATH="$libdir" "$root/$example/$example" "$root/softplus.json"
    LD_LIBRARY_PATH="$libdir" "$BUILD/apps/tape/tape" show "$root/softplus.json" | grep -q softplus \
      || { echo "FAIL: the tape of the custom op does not show it"; exit 1; }
  elif [[ $example == gpt ]]; then  # its command line: tests/examples/gpt_checks.sh
    mkdir "$root/gpt-run"
    LD_LIBRARY_PATH="$libdir" "$SOURCE/tests/examples/gpt_checks.sh" "$root/$example/$example" "$BUILD/apps/tape/tape" \
      "$root/gpt-run"
  else
    LD_LIBRARY_PATH="$libdir" "$root/$example/$example"
  fi
  passed=$((passed + 1))
done
# The same install through its CMake package. Its files name no absolute path (they find the prefix
# from their own place), so the target must point into the DESTDIR root.
command -v cmake > /dev/null || { echo "FAIL: no cmake to build the examples with (scripts/deps.sh installs it)"; exit 1; }
config=$(find "$root/dest" -name tapegradConfig.cmake | head -n 1)
[[ -n "$config" ]] || { echo "FAIL: meson install put no tapegradConfig.cmake in place"; exit 1; }
for example in char_mlp gpt; do
  cmake -S "$SOURCE/examples/$example" -B "$root/cmake-$example" -G Ninja -Dtapegrad_DIR="$(dirname "$config")" \
    > "$root/setup.log" 2>&1 || { cat "$root/setup.log"; exit 1; }
  cmake --build "$root/cmake-$example" > "$root/ninja.log" 2>&1 || { cat "$root/ninja.log"; exit 1; }
  grep -q "$root/dest/[^ ]*/libtapegrad.so" "$root/cmake-$example/build.ninja" \
    || { echo "FAIL: CMake's tapegrad::tapegrad does not point into the install root $root/dest"; exit 1; }
  echo "== $example (cmake)"
  if [[ $example == gpt ]]; then  # the meson build's run, a few steps
    LD_LIBRARY_PATH="$libdir" "$root/cmake-$example/$example" train --steps 5 --checkpoint "$root/gpt-cmake.sd" \
      > "$root/gpt-cmake.log"
    grep -E '^step (1|5) ' "$root/gpt-cmake.log"
    grep -q '^step 5 loss' "$root/gpt-cmake.log" || { echo "FAIL: the CMake-built gpt did not reach step 5"; exit 1; }
  else
    LD_LIBRARY_PATH="$libdir" "$root/cmake-$example/$example"
  fi
  passed=$((passed + 1))
done
echo "$passed passed, 0 failed"
