#!/usr/bin/env python3
"""Paired comparison of two builds of one benchmark program (the runtime
before and after a change): each round runs both, back to back,
alternating which goes first; prints per pattern (call_costs) or for the
wall time (any other program) the medians and the median and quartiles of
the within-round ratio NEW/OLD.

  benches/compare_builds.py --rounds 21 --env HEAPDUMP_BACKTRACE=off,HEAPDUMP_SIGNAL=0 OLD_call_costs NEW_call_costs
  benches/compare_builds.py --rounds 15 --env HEAPDUMP_SIGNAL=0,LD_PRELOAD=... OLD_prog NEW_prog
"""
import argparse, os, statistics, subprocess, sys, time

def paired(xs, ys):
    """The median and quartiles of the within-round ratios y/x."""
    rs = sorted(y / x for x, y in zip(xs, ys))
    q = len(rs) // 4
    return statistics.median(rs), rs[q], rs[-q - 1]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--env", default="", help="NAME=VALUE,... for both")
    ap.add_argument("--env-old", default="", help="NAME=VALUE,... for OLD only")
    ap.add_argument("--env-new", default="", help="NAME=VALUE,... for NEW only")
    ap.add_argument("old")
    ap.add_argument("new")
    a = ap.parse_args()
    parse = lambda s: dict(kv.split("=", 1) for kv in s.split(",") if kv)
    base = dict(os.environ, **parse(a.env))
    # By role, not by command: OLD and NEW may be one program run under
    # two environments.
    env_old, env_new = dict(base, **parse(a.env_old)), dict(base, **parse(a.env_new))

    def run(cmd, env):
        t = time.perf_counter()
        out = subprocess.run(cmd.split(), env=env, capture_output=True, text=True, check=True).stdout
        wall = time.perf_counter() - t
        pairs = [x.split("=", 1) for x in out.split() if "=" in x]
        figures = {k: float(v) for k, v in pairs if v.replace(".", "", 1).isdigit()}
        figures["wall_s"] = wall
        return figures

    old, new = [], []
    for r in range(a.rounds):
        order = [(a.old, env_old, old), (a.new, env_new, new)]
        for cmd, env, acc in order if r % 2 else order[::-1]:
            acc.append(run(cmd, env))
    for k in old[0]:
        xs, ys = [o[k] for o in old], [n[k] for n in new]
        if min(xs) <= 0:
            continue
        med, lo, hi = paired(xs, ys)
        print(f"{k:12s} old median {statistics.median(xs):9.3f} best {min(xs):9.3f}  new median {statistics.median(ys):9.3f} "
              f"best {min(ys):9.3f}  new/old paired: median {med:.3f} (quartiles {lo:.3f}-{hi:.3f})")

if __name__ == "__main__":
    sys.exit(main())
