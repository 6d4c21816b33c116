# Debian packages tapegrad needs, sourced by scripts/bootstrap.sh, scripts/test.sh and .ci/run.
# BUILD_PACKAGES build and run it; TEST_PACKAGES are what the test suite adds (graphviz renders the
# tape's DOT, chromium loads the tape's HTML page, clang builds the fuzzers, python3 runs the
# fixture generators, python3-torch is tests/oracle's reference, cmake builds examples against the
# installed CMake package in tests/examples). npm (to install playwright-core,
# which drives chromium) comes with a Node.js that is already there, or with Debian's npm otherwise:
# see install_npm (Debian's npm conflicts with the NodeSource nodejs some machines carry).
BUILD_PACKAGES="meson ninja-build pkg-config g++ libxtensor-dev xtl-dev libxsimd-dev doctest-dev
  libsimdjson-dev libcli11-dev zlib1g-dev libbenchmark-dev"
# the CPU's matrix products (src/kernels/cpu/linalg.cpp)
BUILD_PACKAGES="$BUILD_PACKAGES libopenblas-dev"
# CPU ranks: Open MPI (src/dist's MPI backend, mpirun; docs/distributed.md). GPU ranks use NCCL,
# which comes with CUDA.
BUILD_PACKAGES="$BUILD_PACKAGES libopenmpi-dev openmpi-bin"
TEST_PACKAGES="graphviz chromium python3 python3-torch clang libclang-rt-dev"
TEST_PACKAGES="$TEST_PACKAGES cmake"

install_packages() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends "$@" > /dev/null
}

install_npm() {
  command -v npm > /dev/null 2>&1 || install_packages npm
}

# What the build and the tests need, installed only where it is missing (a machine that has it all
# pays nothing): BUILD_PACKAGES and TEST_PACKAGES, npm, and the browser test's node modules
# (tests/tape/browser, from its lock file).
ensure_test_tools() {
  local missing=()
  for p in $BUILD_PACKAGES $TEST_PACKAGES; do
    dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    if [[ $(id -u) -ne 0 ]]; then
      echo "tests: missing packages (${missing[*]}); run scripts/bootstrap.sh as root first" >&2
      return 1
    fi
    echo "== installing what the tests need: ${missing[*]}"
    install_packages "${missing[@]}"
  fi
  install_npm
  if [[ -f tests/tape/browser/package-lock.json && ! -d tests/tape/browser/node_modules/playwright-core ]]; then
    (cd tests/tape/browser && npm ci --no-audit --no-fund --loglevel=error)
  fi
}
