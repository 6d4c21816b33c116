# Debian packages tapegrad needs, sourced by scripts/bootstrap.sh and .ci/run.
# BUILD_PACKAGES build and run it; TEST_PACKAGES are what the test suite adds (graphviz renders the
# tape's DOT, chromium loads the tape's HTML page). npm (to install playwright-core, which drives
# chromium) comes with a Node.js that is already there, or with Debian's npm otherwise: see
# install_npm (Debian's npm conflicts with the NodeSource nodejs some machines carry).
BUILD_PACKAGES="meson ninja-build pkg-config g++ libxtensor-dev xtl-dev libxsimd-dev doctest-dev
  libsimdjson-dev libcli11-dev zlib1g-dev libbenchmark-dev"
TEST_PACKAGES="graphviz chromium python3"

install_packages() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends "$@" > /dev/null
}

install_npm() {
  command -v npm > /dev/null 2>&1 || install_packages npm
}
