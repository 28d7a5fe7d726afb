#!/usr/bin/env bash
# Runs every test of the workspace, first installing what the tests need
# on a fresh Debian machine: the outside oracles (valgrind for leaks,
# go tool pprof, memlab, graphviz, headless Chromium; gdb's gcore for the
# core files `heapdump core` reads), gcc/g++ for the
# traced C and C++ programs, and the real programs traced (CPython, perl,
# gawk, sqlite3, git).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v valgrind >/dev/null || need+=(valgrind)
command -v gcore >/dev/null || need+=(gdb)
[ -x /usr/bin/time ] || need+=(time)   # the peak memory of a capture (attach_in_containers_and_crafted_cores)
command -v gcc >/dev/null || need+=(gcc)
command -v strip >/dev/null || need+=(binutils)  # the static mimalloc tests strip a program
command -v g++ >/dev/null || need+=(g++)
command -v go >/dev/null || need+=(golang-go)
command -v dot >/dev/null || need+=(graphviz)
command -v groff >/dev/null || need+=(groff-base)   # renders the manual pages (manual_pages)
command -v chromium >/dev/null || need+=(chromium)
command -v node >/dev/null || need+=(nodejs npm)
# The real programs the tests trace and compare with valgrind.
[ -x /usr/bin/python3 ] || need+=(python3)
[ -x /usr/bin/perl ] || need+=(perl)
[ -x /usr/bin/gawk ] || need+=(gawk)
[ -x /usr/bin/sqlite3 ] || need+=(sqlite3)
[ -x /usr/bin/git ] || need+=(git)
[ -x /usr/bin/tclsh ] || need+=(tcl)   # a Tcl dict in a compact dump (allocation_wrappers_and_names)
# glibc's own names (__GI___tsearch) in the stacks, as valgrind shows them.
dpkg -s libc6-dbg >/dev/null 2>&1 || need+=(libc6-dbg)
dpkg -s python3-venv >/dev/null 2>&1 || need+=(python3-venv)   # the venv DuckDB is installed into (parquet_tables)
command -v java >/dev/null || need+=(default-jre-headless)   # Spark's (parquet_tables)
[ -x /usr/bin/cppcheck ] || need+=(cppcheck)   # a stripped Debian C++ program (cxx_classes_in_stripped_programs)
# Production shapes: a pre-fork server, and musl programs.
[ -x /usr/sbin/nginx ] || need+=(nginx)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v musl-gcc >/dev/null || need+=(musl-tools)
# jemalloc, preloaded and linked in statically, and Redis, which loads it (jemalloc_heap_walk).
[ -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ] || need+=(libjemalloc2)
[ -e /usr/lib/x86_64-linux-gnu/libjemalloc.a ] || need+=(libjemalloc-dev)
[ -x /usr/bin/redis-server ] || need+=(redis-server)
# mimalloc 2.0, preloaded (mimalloc_heap_walk).
[ -e /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 ] || need+=(libmimalloc2.0)
# tcmalloc (gperftools 2.10), preloaded (tcmalloc_heap_walk).
dpkg -s libtcmalloc-minimal4 >/dev/null 2>&1 || need+=(libtcmalloc-minimal4)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# memlab reads our .heapsnapshot files; puppeteer's browser download is
# not needed (and not reachable).
if [ ! -d target/node/node_modules/@memlab/heap-analysis ]; then
  mkdir -p target/node
  PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix target/node --no-audit --no-fund --loglevel=error @memlab/heap-analysis@2.0.5 >/dev/null
fi

# DuckDB reads the Parquet exports (parquet_tables.rs): from PyPI, into a
# venv under target/ (Debian's python3 refuses a pip install outside one).
if ! target/py/bin/python -c 'import duckdb' 2>/dev/null; then
  /usr/bin/python3 -m venv target/py
  target/py/bin/pip install -q --disable-pip-version-check duckdb
fi
# pyspark (about 2 minutes to install: one Spark job in parquet_tables).
if ! target/py/bin/python -c 'import pyspark' 2>/dev/null; then
  target/py/bin/pip install -q --disable-pip-version-check pyspark
fi

# The preload library and the demo program are used by the CLI's tests.
cargo build --workspace --bins --lib
cargo test --workspace "$@"
