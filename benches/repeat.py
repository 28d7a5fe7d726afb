#!/usr/bin/env python3
"""Repeat questions on a big dump (issue 22): each command without the
caches (`--no-cache`), the first time (computing and writing its part of
the caches), and again from them, `--rounds` times; medians and the
slowest, with the peak RSS. A fresh XDG_CACHE_HOME per run of the script.

  benches/repeat.py --heapdump target/release/heapdump --dump d10.hdump [--rounds 5]

The dump of issue 18's dense heap at 10 M blocks:
  gcc -O2 -o dense benches/c/dense.c
  heapdump run --mode compact --no-at-exit -o d10.hdump -- ./dense 10000000 d10.hdump
"""
import argparse, json, os, statistics, subprocess, tempfile, time


def timed(cmd, env):
    """Seconds, peak RSS (MiB) and stdout of one command, through /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r") as f:
        t0 = time.monotonic()
        out = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", f.name] + cmd, env=env, capture_output=True, check=True).stdout
        dt = time.monotonic() - t0
        rss = int(f.read().split()[-1]) / 1024
    return dt, rss, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heapdump", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    h = a.heapdump
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        # A block for `path`: the last of the largest retainers (a leaf).
        _, _, out = timed([h, "--no-cache", "retained", "--json", "-n", "5", a.dump], env)
        addr = json.loads(out)[-1]["address"]
        commands = [
            ("retained -n 5", ["retained", "-n", "5", a.dump]),
            ("leaks", ["leaks", a.dump]),
            ("top", ["top", a.dump]),
            ("path", ["path", a.dump, addr]),
            ("path --all", ["path", "--all", a.dump, addr]),
        ]
        rows = []
        for name, args in commands:
            cold, _, _ = timed([h, "--no-cache"] + args, env)
            first, _, _ = timed([h] + args, env)
            again = [timed([h] + args, env) for _ in range(a.rounds)]
            times = [t for t, _, _ in again]
            rows.append((name, cold, first, statistics.median(times), max(times), max(r for _, r, _ in again)))
        print(f"{a.rounds} rounds from the caches; the caches written by the first runs, in this order\n")
        print("| command | without the caches (s) | first, writing its part (s) | from them, median (s) | slowest (s) | peak RSS (MiB) |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, cold, first, med, slow, rss in rows:
            print(f"| `{name}` | {cold:.2f} | {first:.2f} | {med:.2f} | {slow:.2f} | {rss:.0f} |")
        sizes = {e.name.rsplit(".", 1)[-1]: e.stat().st_size for e in os.scandir(os.path.join(cache, "heapdump", "analysis"))}
        print("\ncache files (MB): " + ", ".join(f"{k} {v / 1e6:.0f}" for k, v in sorted(sizes.items())))


if __name__ == "__main__":
    main()
