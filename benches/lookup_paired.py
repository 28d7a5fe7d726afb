#!/usr/bin/env python3
"""One address lookup for the runtime, the analysis and attach (issue 38):
the three places that ask "which block does this word point into", timed
for two builds, paired. Each round runs both builds back to back,
alternating which goes first, on:

- pause: the hold of a compact signal dump of the dense heap of N blocks
  (benches/c/dense.c under `heapdump run`, `pause_us` of `summary --json`);
- leaks, retained: `leaks --no-cache` and `retained --no-cache` on one
  compact dump of that heap (made by the first build, read by both);
- full-leaks: `leaks --no-cache` on a full dump of --full-n blocks, whose
  words the load looks up one by one (a compact dump's pointers are
  resolved by ordinal: only its roots are looked up);
- attach: the hold of `heapdump attach` on the dense heap of --attach-n
  blocks (benches/c/dense_mapped.c, no file mapped).

Prints per measure the medians and the median and quartiles of the ratio
B/A within rounds.

  benches/lookup_paired.py --a OLD/heapdump --b target/release/heapdump --rounds 5
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile, time

from compare_builds import paired

here = os.path.dirname(os.path.abspath(__file__))

def pause(hd, prog, n, mode, out):
    if os.path.exists(out):
        os.remove(out)
    subprocess.run([hd, "run", "--mode", mode, "--no-at-exit", "-o", out, "--", prog, str(n), out],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    s = json.loads(subprocess.run([hd, "summary", "--json", out], capture_output=True, text=True, check=True).stdout)
    return s["pause_us"] / 1e6

def wall(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0

def attach(hd, pid, out):
    r = subprocess.run([hd, "attach", str(pid), "-o", out], capture_output=True, text=True, check=True)
    os.unlink(out)
    return float(re.search(r"held ([0-9.]+) ms", r.stdout).group(1)) / 1e3

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the build before")
    ap.add_argument("--b", required=True, help="the build after")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--full-n", type=int, default=2_000_000)
    ap.add_argument("--attach-n", type=int, default=1_000_000)
    ap.add_argument("--only", default="pause,leaks,retained,full-leaks,attach")
    a = ap.parse_args()
    only = a.only.split(",")
    builds = [("A", a.a), ("B", a.b)]
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        dense = os.path.join(tmp, "dense")
        subprocess.run(["gcc", "-O2", "-o", dense, os.path.join(here, "c", "dense.c")], check=True)
        mapped = os.path.join(tmp, "dense_mapped")
        subprocess.run(["gcc", "-O2", "-o", mapped, os.path.join(here, "c", "dense_mapped.c")], check=True)
        compact = os.path.join(tmp, "compact.hdump")
        full = os.path.join(tmp, "full.hdump")
        if "leaks" in only or "retained" in only:
            pause(a.a, dense, a.n, "compact", compact)
        if "full-leaks" in only:
            pause(a.a, dense, a.full_n, "full", full)
        out = os.path.join(tmp, "d.hdump")
        for r in range(a.rounds):
            order = builds if r % 2 == 0 else builds[::-1]
            def each(what, f):
                if what in only:
                    for name, hd in order:
                        got.setdefault(what, {"A": [], "B": []})[name].append(f(hd))
            each("pause", lambda hd: pause(hd, dense, a.n, "compact", out))
            each("leaks", lambda hd: wall([hd, "leaks", "--no-cache", compact]))
            each("retained", lambda hd: wall([hd, "retained", "--no-cache", compact]))
            each("full-leaks", lambda hd: wall([hd, "leaks", "--no-cache", full]))
            if "attach" in only:
                p = subprocess.Popen([mapped, str(a.attach_n)], stdout=subprocess.PIPE, text=True)
                pid = int(p.stdout.readline().split()[1])
                each("attach", lambda hd: attach(hd, pid, os.path.join(tmp, "a.hdump")))
                subprocess.run(["kill", "-CONT", str(pid)])
                p.wait()
            print(f"round {r + 1}: " + ", ".join(f"{w} {v['A'][-1]:.3f}/{v['B'][-1]:.3f}" for w, v in got.items()),
                  file=sys.stderr, flush=True)
    print("| measure | A median (s) | B median (s) | B/A paired: median (quartiles) |")
    print("|---|---:|---:|---:|")
    for w, v in got.items():
        med, lo, hi = paired(v["A"], v["B"])
        print(f"| {w} | {statistics.median(v['A']):.3f} | {statistics.median(v['B']):.3f} | {med:.3f} ({lo:.3f}-{hi:.3f}) |")

if __name__ == "__main__":
    sys.exit(main())
