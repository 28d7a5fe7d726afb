#!/usr/bin/env python3
"""How long `heapdump attach` holds a program, per allocator (issue 40):
benches/c/dense_mapped.c builds N dense nodes of 48 bytes (two pointers each
to earlier nodes) with glibc's malloc, and the same program with Debian's
libjemalloc2, then libmimalloc2.0, preloaded, and Debian's libtcmalloc-minimal4,
and built with musl-gcc (musl's mallocng); each round attaches to the same
stopped process.
Prints the median hold (the report line's "held X ms"), heapdump's median
peak resident memory (/usr/bin/time) and the blocks and bytes it read.

  benches/attach_allocators.py --heapdump target/release/heapdump --sizes 1000000 --rounds 3
"""
import argparse, os, re, statistics, subprocess, sys, tempfile

# (name, environment, compiler)
ALLOCATORS = [("glibc", {}, "gcc"), ("jemalloc", {"LD_PRELOAD": "libjemalloc.so.2"}, "gcc"), ("mimalloc", {"LD_PRELOAD": "libmimalloc.so.2"}, "gcc"), ("tcmalloc", {"LD_PRELOAD": "libtcmalloc_minimal.so.4"}, "gcc"), ("musl", {}, "musl-gcc")]

def attach(heapdump, pid, tmp):
    out = os.path.join(tmp, "a.hdump")
    r = subprocess.run(["/usr/bin/time", "-f", "peak-kb %M", heapdump, "attach", str(pid), "-o", out],
                       capture_output=True, text=True, check=True)
    os.unlink(out)
    held = float(re.search(r"held ([0-9.]+) ms", r.stdout).group(1)) / 1e3
    peak = int(re.search(r"peak-kb (\d+)", r.stderr).group(1)) * 1024
    n, b = re.search(r"(\d+) allocations, (\d+) usable bytes", r.stdout).groups()
    return held, peak, int(n), int(b)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heapdump", required=True)
    ap.add_argument("--sizes", default="1000000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated allocators (default: all)")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        progs = {}
        for cc in sorted({c for _, _, c in ALLOCATORS}):
            progs[cc] = os.path.join(tmp, "dense_mapped-" + cc)
            subprocess.run([cc, "-O2", "-o", progs[cc], os.path.join(here, "c", "dense_mapped.c")], check=True)
        print("| blocks | allocator | hold (s) | heapdump's peak (MiB) | blocks read | usable bytes read |")
        print("|---:|---|---:|---:|---:|---:|")
        for n in map(int, a.sizes.split(",")):
            for name, env, cc in ALLOCATORS:
                if only and name not in only:
                    continue
                p = subprocess.Popen([progs[cc], str(n)], stdout=subprocess.PIPE, text=True, env=dict(os.environ, **env))
                pid = int(p.stdout.readline().split()[1])
                got = [attach(a.heapdump, pid, tmp) for _ in range(a.rounds)]
                subprocess.run(["kill", "-CONT", str(pid)])
                p.wait()
                held = statistics.median(g[0] for g in got)
                peak = statistics.median(g[1] for g in got)
                print(f"| {n:,} | {name} | {held:.3f} | {peak / (1 << 20):.0f} | {got[0][2]:,} | {got[0][3]:,} |", flush=True)

if __name__ == "__main__":
    sys.exit(main())
