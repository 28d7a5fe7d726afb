#!/usr/bin/env python3
"""How long `heapdump attach` holds a program (issue 37): benches/c/dense_mapped.c
builds N dense nodes, with or without a FILE mapped whole beside the heap
(made sparse with truncate: no disk used), and stops; each round attaches
every build given, alternating their order, to the same stopped process,
with and without the file. Prints the median hold (the dump's own figure,
"held X ms") and the median peak resident memory of heapdump (/usr/bin/time).

  benches/attach_hold.py --heapdump target/release/heapdump --baseline OLD/target/release/heapdump \\
      --sizes 1000000,10000000 --file-gb 4 --rounds 3
"""
import argparse, os, re, statistics, subprocess, sys, tempfile

def attach(heapdump, pid, tmp):
    out = os.path.join(tmp, "a.hdump")
    r = subprocess.run(["/usr/bin/time", "-f", "peak-kb %M", heapdump, "attach", str(pid), "-o", out],
                       capture_output=True, text=True, check=True)
    os.unlink(out)
    held = float(re.search(r"held ([0-9.]+) ms", r.stdout).group(1)) / 1e3
    peak = int(re.search(r"peak-kb (\d+)", r.stderr).group(1)) * 1024
    return held, peak

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heapdump", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--file-gb", type=float, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    builds = [("new", a.heapdump)] + ([("baseline", a.baseline)] if a.baseline else [])
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "dense_mapped")
        subprocess.run(["gcc", "-O2", "-o", prog, os.path.join(here, "c", "dense_mapped.c")], check=True)
        big = os.path.join(tmp, "data.bin")
        with open(big, "wb") as f:
            f.truncate(int(a.file_gb * (1 << 30)))
        print("| blocks | file | build | hold (s) | heapdump's peak (MiB) |")
        print("|---:|---|---|---:|---:|")
        for n in map(int, a.sizes.split(",")):
            for with_file in (True, False):
                args = [prog, str(n)] + ([big] if with_file else [])
                p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
                pid = int(p.stdout.readline().split()[1])
                got = {name: [] for name, _ in builds}
                for r in range(a.rounds):
                    order = builds if r % 2 == 0 else builds[::-1]
                    for name, hd in order:
                        got[name].append(attach(hd, pid, tmp))
                subprocess.run(["kill", "-CONT", str(pid)])
                p.wait()
                for name, _ in builds:
                    held = statistics.median(h for h, _ in got[name])
                    peak = statistics.median(m for _, m in got[name])
                    label = f"{a.file_gb:g} GB mapped" if with_file else "none"
                    print(f"| {n:,} | {label} | {name} | {held:.3f} | {peak / (1 << 20):.0f} |", flush=True)

if __name__ == "__main__":
    sys.exit(main())
