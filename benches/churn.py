#!/usr/bin/env python3
"""Issue 43's tracker workload: many small, short-lived allocations across
threads (benches/c/churn_threads.c: 4 threads, 2 M allocations each of
16-200 bytes from eight call sites, each freed 64 allocations later).
Paired rounds (each runs every variant, the order alternating) of the
untraced program, each preload library given with a site for every
allocation (heapdump's default), and heaptrack; wall time and CPU time
(user + system of the process and its children: heaptrack's interpreter
runs beside the program), medians, and the median over rounds of each
variant's ratio to the untraced run within the round.

  benches/churn.py --preload OLD/libheapdump_preload.so --preload NEW/libheapdump_preload.so [--rounds 9]
"""
import argparse, os, shutil, statistics, subprocess, sys, tempfile, time

here = os.path.dirname(os.path.abspath(__file__))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", default="4")
    ap.add_argument("--allocations", default="2000000", help="per thread")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "churn_threads")
        subprocess.run(["gcc", "-O2", "-g", "-pthread", "-o", prog, os.path.join(here, "c", "churn_threads.c")], check=True)
        cmd = [prog, a.threads, a.allocations]
        variants = [("untraced", {}, cmd)]
        for p in a.preload:
            variants.append((f"every site, {p}", {"LD_PRELOAD": p, "HEAPDUMP_SIGNAL": "0", "HEAPDUMP_AT_EXIT": "0"}, cmd))
        if shutil.which("heaptrack"):
            variants.append(("heaptrack", {}, ["heaptrack", "-o", os.path.join(tmp, "ht")] + cmd))
        res = {v[0]: [] for v in variants}
        for r in range(a.rounds):
            for name, env, c in (variants if r % 2 == 0 else variants[::-1]):
                t0 = time.perf_counter()
                p = subprocess.Popen(c, env=dict(os.environ, **env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _, status, ru = os.wait4(p.pid, 0)
                if os.waitstatus_to_exitcode(status) != 0:
                    sys.exit(f"{name}: exit {os.waitstatus_to_exitcode(status)}")
                res[name].append((time.perf_counter() - t0, ru.ru_utime + ru.ru_stime))
                for f in os.listdir(tmp):
                    if f.startswith("ht"):
                        os.remove(os.path.join(tmp, f))
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        print("| variant | wall (s) | CPU (s) | wall ratio (paired) | CPU ratio (paired) |\n|---|---:|---:|---:|---:|")
        base = res["untraced"]
        for name, _, _ in variants:
            xs = res[name]
            print(f"| {name} | {statistics.median(x[0] for x in xs):.3f} | {statistics.median(x[1] for x in xs):.3f} | "
                  f"{statistics.median(x[0] / b[0] for x, b in zip(xs, base)):.2f}x | "
                  f"{statistics.median(x[1] / b[1] for x, b in zip(xs, base)):.2f}x |")
        if "heaptrack" in res:
            for name, _, _ in variants[1:-1]:
                w = statistics.median(h[0] / x[0] for h, x in zip(res["heaptrack"], res[name]))
                c = statistics.median(h[1] / x[1] for h, x in zip(res["heaptrack"], res[name]))
                print(f"heaptrack over {name}: wall {w:.2f}x, CPU {c:.2f}x (paired)")

if __name__ == "__main__":
    main()
