#!/usr/bin/env python3
"""The viewer from the caches, two builds paired: each build reads its own
caches (made, and read once, before the rounds), the two alternating
which goes first in each round, every viewer in a session of its own at
autogroup and nice -15 (kernel.sched_autogroup_enabled=1: plain `nice`
weighs only inside a session). Prints each build's medians (the first
page as benches/viewer.py counts it, the tree tab's /api/rows, the
largest group opened, /api/suspects, the slowest expansion, a block's
page) and the medians of the within-round ratios.

With --caches DIR both builds read the caches in DIR (an XDG_CACHE_HOME
made beforehand: builds whose caches are the same format; at 10^8 blocks
two sets would not fit a small disk). With --cold the page cache is
dropped before each viewer starts (as root: /proc/sys/vm/drop_caches),
the opening of a dump whose caches were written long ago.

  benches/viewer_paired.py --old OLD/heapdump --new target/release/heapdump --dump DUMP --rounds 5
  benches/viewer_paired.py --old OLD/heapdump --new target/release/heapdump --dump m100.hdump --caches XDG --cold --rounds 3
"""
import argparse, os, shutil, statistics, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import viewer

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nice", type=int, default=-15)
    ap.add_argument("--caches", help="an XDG_CACHE_HOME with the dump's caches, read by both builds")
    ap.add_argument("--cold", action="store_true", help="drop the page cache before each viewer starts")
    a = ap.parse_args()
    viewer.NICE = a.nice
    bins = {"old": a.old, "new": a.new}
    homes = {k: a.caches or tempfile.mkdtemp(prefix="viewer-paired-") for k in bins}
    try:
        for k, b in bins.items():
            for _ in range(0 if a.caches else 2):  # made, then read once (the page cache warm)
                viewer.one(b, a.dump, homes[k])
                viewer.writers_done(homes[k])
        res = {k: [] for k in bins}
        for r in range(a.rounds):
            for k in (list(bins) if r % 2 == 0 else list(bins)[::-1]):
                if a.cold:
                    os.sync()
                    with open("/proc/sys/vm/drop_caches", "w") as f:
                        f.write("3\n")
                started, first, exp, block, rows, opened, sus = viewer.one(bins[k], a.dump, homes[k])
                viewer.writers_done(homes[k])
                res[k].append((started, started + first, rows, opened, sus, max(exp, default=0.0), block))
    finally:
        for h in homes.values():
            if h != a.caches:
                shutil.rmtree(h, ignore_errors=True)
    med = statistics.median
    names = ["address printed (s)", "first page (s)", "/api/rows (s)", "group opened (s)", "/api/suspects (s)", "slowest expansion (s)", "block page (s)"]
    print(f"{'':24} {'old':>9} {'new':>9} {'new/old':>8}")
    for i, name in enumerate(names):
        o, n = [x[i] for x in res["old"]], [x[i] for x in res["new"]]
        ratio = med([y / max(x, 1e-4) for x, y in zip(o, n)])
        print(f"{name:24} {med(o):9.3f} {med(n):9.3f} {ratio:8.3f}")
    print("load", open("/proc/loadavg").read().split()[:3])

if __name__ == "__main__":
    main()
