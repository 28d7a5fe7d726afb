#!/usr/bin/env python3
"""Dense heaps (issue 18): how long a compact signal dump holds a program
whose heap is N nodes of 48 bytes, each with two pointers to random earlier
nodes (benches/c/dense.c), traced by `heapdump run`.

Each round runs every heapdump given, interleaved (so a noisy machine
weighs on all alike), and reads the pause from the dump's summary; the
table gives medians and, with a baseline, the median over rounds of the
ratio baseline/new within a round.

  benches/dense.py --heapdump target/release/heapdump \
      [--baseline OLD/target/release/heapdump] [--sizes 1000000,10000000] [--rounds 5]

With --analyse, each tool's own dump is also read back by that tool's
`top`, `leaks` and `retained` (the dump of the first round, each command
once per round, interleaved, each a first analysis: no cache): wall time
to the answer (and, when later, to the last cache file written: the
writers may finish after the command) and peak resident memory (of which
the mapped dump file is part), medians.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

here = os.path.dirname(os.path.abspath(__file__))

COMMANDS = ["top", "leaks", "retained"]

def analyse(heapdump, dump):
    """Seconds and peak RSS (bytes) of each analysis command on `dump`: the
    first analysis of the dump each time (a fresh XDG_CACHE_HOME, so no
    cache an earlier command left answers it; writing the caches is part
    of it, as for a user)."""
    res = {}
    for c in COMMANDS:
        cache = tempfile.mkdtemp()
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        t0 = time.monotonic()
        p = subprocess.Popen([heapdump, c, dump], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            sys.exit(f"{heapdump} {c} {dump}: exit {p.returncode}: {p.stderr.read().decode()}")
        answered = time.monotonic() - t0
        # The caches' writers may finish after the answer (a question asked
        # meanwhile waits for them): waited for here, before the next
        # command, and the time to the last file reported beside.
        while any(f.endswith(".tmp") for _, _, fs in os.walk(cache) for f in fs) and time.monotonic() - t0 < 120:
            time.sleep(0.01)
        res[c] = (answered, ru.ru_maxrss * 1024, time.monotonic() - t0)
        shutil.rmtree(cache)
    return res

def pause_us(heapdump, prog, n, mode, tmp, keep=None):
    out = os.path.join(tmp, "d.hdump")
    if os.path.exists(out):
        os.remove(out)
    # The program waits for the dump file to stop growing (a run before
    # issue 16's fix did not wait for a signal dump the program outlived).
    r = subprocess.run([heapdump, "run", "--mode", mode, "--no-at-exit", "-o", out, "--", prog, str(n), out],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0 or not os.path.exists(out):
        sys.exit(f"{heapdump}: no dump: {r.stderr}")
    s = json.loads(subprocess.run([heapdump, "summary", "--json", out], capture_output=True, text=True, check=True).stdout)
    size = os.path.getsize(out)
    if keep:
        os.replace(out, keep)
    else:
        os.remove(out)
    return s["pause_us"], size, s["allocations"]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heapdump", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--sizes", default="1000000,2000000,10000000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mode", default="compact")
    ap.add_argument("--analyse", action="store_true", help="also time top, leaks and retained on the dumps")
    ap.add_argument("--program", default="c", choices=["c", "rust"],
                    help="c: benches/c/dense.c (one 48-byte block per node); rust: benches/src/bin/dense_rust.rs "
                         "(a Box of 48 bytes and a Vec of 16 per node)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.program == "c":
            prog = os.path.join(tmp, "dense")
            subprocess.run(["gcc", "-O2", "-o", prog, os.path.join(here, "c", "dense.c")], check=True)
        else:
            subprocess.run(["cargo", "build", "--release", "-q", "--manifest-path", os.path.join(here, "Cargo.toml"),
                            "--bin", "dense_rust"], check=True)
            prog = os.path.join(here, "target", "release", "dense_rust")
        tools = [("new", a.heapdump)] + ([("baseline", a.baseline)] if a.baseline else [])
        print(f"| blocks | {' | '.join(f'{t} pause (s)' for t, _ in tools)} |{' baseline/new (paired) |' if a.baseline else ''} file (B per block) |")
        print(f"|---:|{'---:|' * len(tools)}{'---:|' if a.baseline else ''}---:|")
        for n in [int(x) for x in a.sizes.split(",")]:
            res = {t: [] for t, _ in tools}
            size = allocs = 0
            kept = {}
            for r in range(a.rounds):
                for t, h in tools:
                    keep = os.path.join(tmp, f"{t}.hdump") if a.analyse and r == 0 else None
                    p, sz, al = pause_us(h, prog, n, a.mode, tmp, keep)
                    if keep:
                        kept[t] = keep
                    res[t].append(p / 1e6)
                    if t == "new":
                        size, allocs = sz, al
            cells = [f"{statistics.median(res[t]):.2f}" for t, _ in tools]
            if a.baseline:
                cells.append(f"{statistics.median(b / x for b, x in zip(res['baseline'], res['new'])):.1f}x")
            cells.append(f"{size / allocs:.0f}")
            print(f"| {n:,} | {' | '.join(cells)} |", flush=True)
            if kept:
                runs = {t: [] for t in kept}
                for _ in range(a.rounds):
                    for t, h in tools:
                        runs[t].append(analyse(h, kept[t]))
                for t in kept:
                    sz = os.path.getsize(kept[t])
                    row = []
                    for c in COMMANDS:
                        secs = statistics.median(x[c][0] for x in runs[t])
                        rss = statistics.median(x[c][1] for x in runs[t])
                        written = statistics.median(x[c][2] for x in runs[t])
                        tail = f" (caches written {written:.2f} s)" if written > secs + 0.05 else ""
                        row.append(f"{c} {secs:.2f} s{tail}, {rss / 2**20:.0f} MiB ({(rss - sz) / allocs:.0f} B/block beyond the file)")
                    print(f"|   {t}: file {sz / 2**20:.0f} MiB | {' | '.join(row)} |", flush=True)
                for k in kept.values():
                    os.remove(k)

if __name__ == "__main__":
    main()
