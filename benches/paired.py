#!/usr/bin/env python3
"""Paired timing of one program under two environments: each round runs
both, back to back, alternating which goes first; prints the medians and
the median and quartiles of the within-round ratio (B over A).

  benches/paired.py --rounds 25 --a HEAPDUMP_BACKTRACE=off,HEAPDUMP_SIGNAL=0 \\
      --b HEAPDUMP_BACKTRACE=off,HEAPDUMP_SIGNAL=0,HEAPDUMP_NEAR_LIMIT=90 -- benches/target/release/alloc_workload
"""
import argparse, os, statistics, subprocess, sys, time

from compare_builds import paired

def env(spec):
    return dict(kv.split("=", 1) for kv in spec.split(",") if kv)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--a", default="")
    ap.add_argument("--b", default="")
    ap.add_argument("cmd", nargs="+")
    a = ap.parse_args()
    def run(extra):
        t0 = time.perf_counter()
        subprocess.run(a.cmd, env=dict(os.environ, **extra), check=True, capture_output=True)
        return time.perf_counter() - t0
    ea, eb = env(a.a), env(a.b)
    ta, tb = [], []
    for r in range(a.rounds):
        if r % 2:
            ta.append(run(ea)); tb.append(run(eb))
        else:
            tb.append(run(eb)); ta.append(run(ea))
    med, lo, hi = paired(ta, tb)
    print(f"{a.rounds} rounds: A median {statistics.median(ta):.3f} s, B median {statistics.median(tb):.3f} s; "
          f"B/A paired: median {med:.3f}, quartiles {lo:.3f}-{hi:.3f}")

if __name__ == "__main__":
    sys.exit(main())
