#!/usr/bin/env python3
"""What issue 43's memory goal costs in time: one build's `retained
--no-cache` on a large dump, its heap's tables moved to a file as shipped
(page cache the kernel can write back and drop) against kept in anonymous
memory. For the second, the command runs in a mount namespace of its own
whose /var/tmp is a tmpfs and TMPDIR points there: the move never goes to
a file system held in memory (see crates/analyze/src/spill.rs), so the
tables stay where the load built them. Nothing else differs.

Each round runs both back to back, alternating which goes first; the table
gives each measure's medians and the median of the within-round ratios
(anonymous / file). Wall, CPU (user + system, from wait4) and peak RssAnon
are measured as benches/lost.py measures them. Needs root (unshare -m).

  benches/tables_in_file.py --heapdump target/release/heapdump --dump DUMP [--rounds 3] [--command retained]
"""
import argparse, json, os, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lost import measure  # noqa: E402

IN_MEMORY = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs none /var/tmp && TMPDIR=/var/tmp exec "$@"', "sh"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heapdump", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--command", default="retained")
    a = ap.parse_args()
    hd = os.path.abspath(a.heapdump)
    cmd = [hd, *a.command.split(), "--no-cache", a.dump]
    runs = {"file": [], "anonymous": []}
    for r in range(a.rounds):
        order = ["file", "anonymous"] if r % 2 == 0 else ["anonymous", "file"]
        for kind in order:
            m = measure(cmd if kind == "file" else IN_MEMORY + cmd, dict(os.environ))
            if m is None:
                sys.exit(f"{kind}: the command failed")
            runs[kind].append(m)
            print(f"round {r + 1} {kind}: {m[0]:.2f} s wall, {m[1]:.2f} s CPU, RssAnon {m[2] / 2**20:.0f} MiB", flush=True)
    out = subprocess.run([hd, "summary", "--json", "--no-cache", a.dump], capture_output=True, text=True, check=True)
    blocks = json.loads(out.stdout)["allocations"]
    med = lambda kind, i: statistics.median(x[i] for x in runs[kind])  # noqa: E731
    ratio = lambda i: statistics.median(y[i] / x[i] for x, y in zip(runs["file"], runs["anonymous"]))  # noqa: E731
    print(f"\n{a.command} --no-cache, {blocks} blocks, {a.rounds} rounds paired\n")
    print("| tables | wall (s) | CPU (s) | RssAnon (B per block) |")
    print("|---|---:|---:|---:|")
    for kind in ["file", "anonymous"]:
        print(f"| {kind} | {med(kind, 0):.2f} | {med(kind, 1):.2f} | {med(kind, 2) / blocks:.1f} |")
    print(f"| anonymous / file (median of the rounds' ratios) | {ratio(0):.3f} | {ratio(1):.3f} | {ratio(2):.2f} |")


if __name__ == "__main__":
    main()
