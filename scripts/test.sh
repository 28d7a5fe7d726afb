#!/usr/bin/env bash
# Runs every test of the workspace, first installing what the tests need
# on a fresh Debian machine (the outside oracles: valgrind, gcc/g++).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v valgrind >/dev/null || need+=(valgrind)
command -v gcc >/dev/null || need+=(gcc)
command -v g++ >/dev/null || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The preload library and the demo program are used by the CLI's tests.
cargo build --workspace --bins --lib
cargo test --workspace "$@"
