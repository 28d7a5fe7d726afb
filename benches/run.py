#!/usr/bin/env python3
"""Runs every heapdump benchmark side by side and writes BENCHMARKS.md.

Usage: python3 benches/run.py [--runs N] [--quick]

Builds the workload once per allocator (untracked, heapdump, dhat,
jemalloc's sampling profiler), the C workload, and the dump and analysis
benchmarks; runs the variants interleaved (run 1 of each, then run 2 of
each, ...) so that machine noise hits them alike; reports medians and
ratios against the untracked program. Needs heaptrack for its rows
(skipped with a note when absent). Nothing here asserts a time.
"""
import argparse, os, platform, re, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BIN = os.path.join(tempfile.gettempdir(), "heapdump-bench-bins")


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def build():
    os.makedirs(BIN, exist_ok=True)
    for feat, name in [(None, "plain"), ("tracked", "tracked"), ("dhat", "dhat"), ("jemalloc", "jemalloc")]:
        args = ["cargo", "build", "--release", "--quiet", "--bin", "alloc_workload"]
        if feat:
            args += ["--features", feat]
        sh(args, cwd=HERE)
        shutil.copy(os.path.join(HERE, "target/release/alloc_workload"), os.path.join(BIN, "workload-" + name))
    for feat, name in [(None, "plain"), ("tracked", "tracked")]:
        sh(["cargo", "build", "--release", "--quiet", "--bin", "call_costs"] + (["--features", feat] if feat else []), cwd=HERE)
        shutil.copy(os.path.join(HERE, "target/release/call_costs"), os.path.join(BIN, "call_costs-" + name))
    sh(["cargo", "build", "--release", "--quiet", "--bin", "dump_bench", "--features", "tracked"], cwd=HERE)
    shutil.copy(os.path.join(HERE, "target/release/dump_bench"), os.path.join(BIN, "dump_bench"))
    sh(["cargo", "build", "--release", "--quiet", "--bin", "analyze_bench"], cwd=HERE)
    shutil.copy(os.path.join(HERE, "target/release/analyze_bench"), os.path.join(BIN, "analyze_bench"))
    sh(["cargo", "build", "--release", "--quiet", "-p", "heapdump-cli", "-p", "heapdump-preload"], cwd=ROOT)
    sh(["gcc", "-O2", "-pthread", "-o", os.path.join(BIN, "cworkload"), os.path.join(HERE, "c/workload.c")])


def timed(cmd, env=None):
    """(wall seconds, max RSS KiB, stdout)"""
    e = dict(os.environ)
    e.update(env or {})
    with tempfile.NamedTemporaryFile("r") as tf:
        t0 = time.perf_counter()
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf.name] + cmd, env=e, capture_output=True, text=True, cwd=tempfile.gettempdir())
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"{cmd} failed: {p.stderr[-2000:]}")
        rss = int(tf.read().strip().splitlines()[-1])
    return wall, rss, p.stdout


def interleaved(variants, runs, rounds=None):
    """Medians (wall, max RSS) by variant, and each variant's last stdout.
    `rounds`, when given, receives each variant's wall times by round."""
    res = {k: [] for k, _ in variants}
    out = {}
    for _ in range(runs):
        for name, (cmd, env) in variants:
            w, r, o = timed(cmd, env)
            res[name].append((w, r))
            out[name] = o
    if rounds is not None:
        rounds.update({k: [x[0] for x in v] for k, v in res.items()})
    return {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}, out


def compare(a, b):
    """How variant a (time ta) compares with b (time tb): 'N.Nx cheaper' or 'N.Nx slower'."""
    ta, tb = a, b
    return f"{tb / ta:.1f}x cheaper" if ta <= tb else f"{ta / tb:.1f}x slower"


def kv(s):
    return {k: v for k, v in re.findall(r"(\w+)=([\w.]+)", s)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smaller dump and analysis sizes")
    a = ap.parse_args()
    build()
    heaptrack = shutil.which("heaptrack")
    md = []
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
    md.append("# Benchmarks\n")
    md.append(f"Produced by `python3 benches/run.py --runs {a.runs}` on {os.cpu_count()} cores ({cpu}), "
              f"{platform.system()} {platform.release()}, {time.strftime('%Y-%m-%d')}. Every figure is the median of "
              f"{a.runs} runs; variants run interleaved in one session. Ratios are against the untracked program.\n")

    # --- tracker overhead ---
    w = lambda n: os.path.join(BIN, "workload-" + n)
    tmp = tempfile.mkdtemp()
    variants = [
        ("untracked (System)", ([w("plain")], {})),
        ("heapdump, addresses only", ([w("tracked")], {"HEAPDUMP_BACKTRACE": "off", "HEAPDUMP_SIGNAL": "0"})),
        ("heapdump, addresses only, --near-limit 90", ([w("tracked")], {"HEAPDUMP_BACKTRACE": "off", "HEAPDUMP_SIGNAL": "0", "HEAPDUMP_NEAR_LIMIT": "90"})),
        ("heapdump, sampled sites (512 KiB)", ([w("tracked")], {"HEAPDUMP_BACKTRACE": "sampled", "HEAPDUMP_SIGNAL": "0"})),
        ("heapdump, a site for every allocation", ([w("tracked")], {"HEAPDUMP_BACKTRACE": "all", "HEAPDUMP_SIGNAL": "0"})),
        ("heapdump, every site, libgcc unwinder", ([w("tracked")], {"HEAPDUMP_BACKTRACE": "all", "HEAPDUMP_SIGNAL": "0", "HEAPDUMP_UNWINDER": "libgcc"})),
        ("dhat-rs (every allocation)", ([w("dhat")], {})),
        ("jemalloc, profiling off", ([w("jemalloc")], {})),
        ("jemalloc, sampling profiler (512 KiB)", ([w("jemalloc")], {"_RJEM_MALLOC_CONF": "prof:true,prof_active:true,lg_prof_sample:19"})),
    ]
    if heaptrack:
        variants.append(("heaptrack (every allocation)", (["heaptrack", "-o", os.path.join(tmp, "ht"), w("plain")], {})))
    by_round = {}
    med, outs = interleaved(variants, a.runs, by_round)
    base = med["untracked (System)"][0]
    md.append("## In-process tracking (issue 3)\n")
    md.append("The Rust workload (`benches/src/bin/alloc_workload.rs`): 1.5 M small boxes, 500 maps of 1000 strings, "
              "20 000 growing vectors, and two threads churning 2 M allocations each; about 2.5 M live allocations at the peak.\n")
    md.append("Ratio is the variant's median over the untracked median; paired is the median over rounds of the ratio within "
              "a round (each round runs every variant once, back to back), which cancels the machine's drift between rounds.\n")
    md.append("| variant | wall (s) | ratio | paired | max RSS (MiB) |\n|---|---:|---:|---:|---:|")
    for name, _ in variants:
        t, r = med[name]
        paired = statistics.median(x / u for x, u in zip(by_round[name], by_round["untracked (System)"]))
        md.append(f"| {name} | {t:.3f} | {t / base:.2f}x | {paired:.2f}x | {r / 1024:.0f} |")
    ht = med.get("heaptrack (every allocation)")
    allsite = med["heapdump, a site for every allocation"][0]
    dh = med["dhat-rs (every allocation)"][0]
    md.append("")
    if ht:
        md.append(f"heapdump with a site for every allocation is {compare(allsite, ht[0])} than heaptrack and "
                  f"{compare(allsite, dh)} than dhat-rs on this workload.\n")
    nalloc = int(kv(outs["heapdump, addresses only"]).get("total_allocations", "0"))
    md.append("Unwinders for sites (`HEAPDUMP_UNWINDER`): the caching `.eh_frame` walker (the default) against libgcc's "
              "`_Unwind_Backtrace` on every capture. The cost of sites is the time above addresses only "
              "(the median over rounds of the difference within a round)"
              + (f", per allocation over the workload's {nalloc:,} allocations" if nalloc else "") + ":\n")
    md.append("| unwinder | sites cost (s) |" + (" per allocation (ns) |" if nalloc else "") + "\n|---|---:|" + ("---:|" if nalloc else ""))
    # Each round runs the variants back to back: the median of the
    # per-round differences is steadier than the difference of medians
    # on this noisy machine.
    for name, variant in [("cached (default)", "heapdump, a site for every allocation"), ("libgcc", "heapdump, every site, libgcc unwinder")]:
        cost = statistics.median(t - o for t, o in zip(by_round[variant], by_round["heapdump, addresses only"]))
        md.append(f"| {name} | {cost:.3f} |" + (f" {cost * 1e9 / nalloc:.0f} |" if nalloc else ""))
    md.append("\nFrame pointers were not measured as a third unwinder: Rust's standard library and Debian's C libraries are "
              "built without them, so a frame-pointer walk would drop frames in exactly the allocation paths; the cached "
              "walker reads the same `.eh_frame` rules libgcc does (the tests compare their frames one by one).\n")
    md.append("Tracker memory (from `heapdump::stats()` at the peak, per live allocation):\n")
    md.append("| mode | tracker bytes | live allocations | bytes per live allocation |\n|---|---:|---:|---:|")
    for mode in ["off", "sampled", "all"]:
        _, _, o = timed([w("tracked")], {"HEAPDUMP_BACKTRACE": mode, "HEAPDUMP_SIGNAL": "0"})
        d = kv(o)
        tb, lc = int(d["tracker_bytes"]), int(d["peak_live_count"])
        md.append(f"| {mode} | {tb} | {lc} | {tb / lc:.1f} |")
    md.append("")
    # Per-call costs in warm loops: the best of several repetitions inside
    # each process, and the best of three processes per build, interleaved.
    costs = {"plain": [], "tracked": []}
    for _ in range(3):
        for b in costs:
            _, _, o = timed([os.path.join(BIN, "call_costs-" + b)], {"HEAPDUMP_BACKTRACE": "off", "HEAPDUMP_SIGNAL": "0"})
            costs[b].append({k: float(v) for k, v in kv(o).items()})
    best = {b: {k: min(r[k] for r in rs) for k in rs[0]} for b, rs in costs.items()}
    md.append("What one call costs (`benches/src/bin/call_costs.rs`: tight loops of one pattern, the best of many "
              "repetitions, ns per iteration; addresses only):\n")
    md.append("| pattern | untracked (ns) | tracked (ns) | added (ns) |\n|---|---:|---:|---:|")
    for k, what in [("lifo", "allocate a box and free it at once"), ("seq_alloc", "allocate a million boxes in order"),
                    ("seq_free", "free them in the same order"),
                    ("realloc", "a string allocated, grown in place, freed (three calls)"),
                    ("random_free", "free a million boxes in random order")]:
        u, t = best["plain"][k], best["tracked"][k]
        md.append(f"| {what} | {u:.1f} | {t:.1f} | {t - u:+.1f} |")
    md.append("")

    # --- preload ---
    cw = os.path.join(BIN, "cworkload")
    hd = os.path.join(ROOT, "target/release/heapdump")
    variants = [
        ("C workload, untracked", ([cw], {})),
        ("heapdump run, a site for every allocation", ([hd, "run", "--no-at-exit", "--signal", "0", "--", cw], {})),
        ("heapdump run, every site, libgcc unwinder", ([hd, "run", "--no-at-exit", "--signal", "0", "--", cw], {"HEAPDUMP_UNWINDER": "libgcc"})),
        ("heapdump run, addresses only", ([hd, "run", "--no-at-exit", "--signal", "0", "--backtrace", "off", "--", cw], {})),
    ]
    if heaptrack:
        variants.append(("heaptrack", (["heaptrack", "-o", os.path.join(tmp, "htc"), cw], {})))
    med, _ = interleaved(variants, a.runs)
    base = med["C workload, untracked"][0]
    md.append("## Any binary through LD_PRELOAD (issue 5)\n")
    md.append("The C workload (`benches/c/workload.c`, same shape as the Rust one), untracked, under `heapdump run`, and under heaptrack.\n")
    md.append("| variant | wall (s) | ratio | max RSS (MiB) |\n|---|---:|---:|---:|")
    for name, _ in variants:
        t, r = med[name]
        md.append(f"| {name} | {t:.3f} | {t / base:.2f}x | {r / 1024:.0f} |")
    if heaptrack:
        md.append(f"\n`heapdump run` with every site is {compare(med['heapdump run, a site for every allocation'][0], med['heaptrack'][0])} than heaptrack.\n")
    md.append("")

    # --- dumps ---
    md.append("## Dumps (issue 4)\n")
    # This machine is a VM whose host takes back guest memory a few seconds
    # after the guest frees it, and backs it again on the next touch: a
    # tmpfs write onto such pages ran at about 600 MiB/s against 2700 MiB/s
    # onto pages in use a moment before. Every run of this section (the
    # baselines and the dumps) is preceded by touching 3 GiB, enough for
    # the largest heap and its dump, so that none of them measures the
    # hypervisor.
    def warm():
        sh(["dd", "if=/dev/zero", "of=/dev/shm/hd-warm", "bs=1M", "count=3072", "status=none"])
        os.remove("/dev/shm/hd-warm")

    dd_t = []
    for _ in range(3):
        warm()
        t0 = time.perf_counter()
        sh(["dd", "if=/dev/zero", "of=/dev/shm/hd-dd", "bs=1M", "count=1024", "status=none"])
        dd_t.append(time.perf_counter() - t0)
        os.remove("/dev/shm/hd-dd")
    dd_rate = 1024 / statistics.median(dd_t)
    # cp reads a 1 GiB file that is not in the CPU caches, as a dump reads the heap.
    sh(["dd", "if=/dev/urandom", "of=/dev/shm/hd-src", "bs=1M", "count=1024", "status=none"])
    cp_t = []
    for _ in range(3):
        warm()
        t0 = time.perf_counter()
        sh(["cp", "/dev/shm/hd-src", "/dev/shm/hd-dst"])
        cp_t.append(time.perf_counter() - t0)
        os.remove("/dev/shm/hd-dst")
    os.remove("/dev/shm/hd-src")
    cp_rate = 1024 / statistics.median(cp_t)
    # dd's work done by the dump's own process, after building the same
    # 1 GiB heap: the like-for-like baseline of a full dump. Each round
    # runs it and a full dump back to back; the ratio is taken per round,
    # since this machine's memory bandwidth drifts between rounds.
    wr, ratios = [], []
    dump_env = {"HEAPDUMP_FORK": "0", "HEAPDUMP_BACKTRACE": "off", "HEAPDUMP_SIGNAL": "0"}
    for _ in range(max(a.runs, 3)):
        warm()
        r = kv(timed([os.path.join(BIN, "dump_bench"), "1024", "write", "nofork", "0"], dump_env)[2])
        w_rate = int(r["file_bytes"]) / 2**20 / float(r["wall_s"])
        warm()
        d = kv(timed([os.path.join(BIN, "dump_bench"), "1024", "full", "nofork", "0"], dump_env)[2])
        d_rate = int(d["file_bytes"]) / 2**20 / float(d["wall_s"])
        wr.append(w_rate)
        ratios.append(d_rate / w_rate)
    write_rate = statistics.median(wr)
    md.append("Each run of this section, baselines and dumps alike, comes right after 3 GiB of memory is touched (a tmpfs file written "
              "and removed): this VM's host takes back memory the guest freed a few seconds before, and a first touch then costs about "
              "1.6 ms per MiB, which would otherwise land on whichever run gets such pages.\n")
    md.append(f"Baselines on the same tmpfs: `dd if=/dev/zero of=/dev/shm/x bs=1M count=1024` writes {dd_rate:.0f} MiB/s "
              f"(its source stays in the CPU cache); `cp` of a 1 GiB tmpfs file copies {cp_rate:.0f} MiB/s (a cold source, as a heap is); "
              f"and `dump_bench 1024 write`, which builds the same 1 GiB heap as the dumps below and then writes as many bytes from a 1 MiB "
              f"buffer as the heap holds, in-process writes {write_rate:.0f} MiB/s. A full dump of that heap, run right after it in each "
              f"of {len(ratios)} rounds, reached a median of {statistics.median(ratios):.2f} of its throughput "
              f"(per round: {', '.join(f'{x:.2f}' for x in ratios)}).\n")
    md.append("Heaps of mixed objects (`benches/src/bin/dump_bench.rs`: lists of 8 B–4 KiB payloads pointing at each other), dumped to tmpfs. "
              "Pause is how long the program's threads were held stopped; with fork, until the child is forked.\n")
    md.append("Tracker is the live table's own memory (`heapdump::stats()`): this heap's small blocks (the 48-byte nodes) lie one to a "
              "few kilobytes apart, between larger payloads, so the table's shadow keeps a 4 KiB page for nearly every 32 KiB of the heap "
              "(an eighth of it): the table's worst case, against about 6 B per allocation for the densely packed workload of issue 3. "
              "`HEAPDUMP_TABLE=buckets` takes about 55 B per allocation here. Dumps estimated at 32 MiB or more are written by a "
              "thread of their own while the dumping thread reads the heap.\n")
    md.append("| heap | mode | fork | allocations | file (MiB) | wall (s) | throughput (MiB/s) | heap scanned (MiB/s) | pause (ms) | tracker (B per allocation) |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    sizes = [10, 100] if a.quick else [10, 100, 1024]
    for mib in sizes:
        for mode in ["full", "compact"]:
            for fork in ["nofork", "fork"]:
                runs = []
                for _ in range(3):
                    warm()
                    _, _, o = timed([os.path.join(BIN, "dump_bench"), str(mib), mode, fork, "0"], {"HEAPDUMP_FORK": "1" if fork == "fork" else "0", "HEAPDUMP_BACKTRACE": "off", "HEAPDUMP_SIGNAL": "0"})
                    runs.append(kv(o))
                wall = statistics.median(float(r["wall_s"]) for r in runs)
                pause = statistics.median(int(r["pause_us"]) for r in runs) / 1000
                fb = int(runs[0]["file_bytes"]) / 2**20
                hb = int(runs[0]["heap_bytes"]) / 2**20
                tracker = int(runs[0]["tracker_bytes"]) / max(1, int(runs[0]["allocations"]))
                md.append(f"| {mib} MiB | {mode} | {fork} | {runs[0]['allocations']} | {fb:.0f} | {wall:.3f} | {fb / wall:.0f} | {hb / wall:.0f} | {pause:.1f} | {tracker:.0f} |")
    md.append("\nThe same 1 GiB heap on huge pages, where fork copies one page-table entry per 2 MiB instead of per 4 KiB: "
              "with glibc's malloc on transparent huge pages (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`), and with the dump "
              "collapsing the heap into huge pages before it stops the world (`HEAPDUMP_FORK=collapse`; wall includes the collapse).\n")
    md.append("| heap | mode | fork | pause (ms) | collapse (s) | wall (s) |\n|---:|---|---|---:|---:|---:|")
    for label, env in [("fork, THP heap", {"HEAPDUMP_FORK": "1", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}),
                       ("fork, collapse", {"HEAPDUMP_FORK": "collapse"})]:
        for mode in ["compact", "full"]:
            runs = []
            for _ in range(3):
                warm()
                _, _, o = timed([os.path.join(BIN, "dump_bench"), str(sizes[-1]), mode, "fork", "0"],
                                dict(env, HEAPDUMP_BACKTRACE="off", HEAPDUMP_SIGNAL="0"))
                runs.append(kv(o))
            md.append(f"| {sizes[-1]} MiB | {mode} | {label} | {statistics.median(int(r['pause_us']) for r in runs) / 1000:.1f} | "
                      f"{statistics.median(int(r['collapse_us']) for r in runs) / 1e6:.2f} | "
                      f"{statistics.median(float(r['wall_s']) for r in runs):.3f} |")
    md.append("\nPause against the number of threads (100 MiB heap, compact, no fork; each extra thread churns allocations):\n")
    md.append("| threads | pause (ms) |\n|---:|---:|")
    for th in [0, 2, 8, 32]:
        runs = []
        for _ in range(3):
            warm()
            _, _, o = timed([os.path.join(BIN, "dump_bench"), "100", "compact", "nofork", str(th)], {"HEAPDUMP_FORK": "0", "HEAPDUMP_BACKTRACE": "off", "HEAPDUMP_SIGNAL": "0"})
            runs.append(int(kv(o)["pause_us"]) / 1000)
        md.append(f"| {th + 1} | {statistics.median(runs):.1f} |")
    md.append("")

    # --- analysis ---
    md.append("## Analysis (issue 6)\n")
    md.append("Synthetic compact dumps (`benches/src/bin/analyze_bench.rs`): N blocks of 48 bytes, two pointers each (one to the next block, one random), "
              "1000 stack roots, 10% of the blocks leaked. Load, then leaks and dominators + retained sizes (the leaks on a second thread while the dominator walk from the roots runs); memory is the analyser's peak heap (a counting allocator), not the mapped file.\n")
    md.append("| allocations | load (s) | leaks, dominators + retained (s) | total (s) | peak heap (MiB) | bytes per allocation |\n|---:|---:|---:|---:|---:|---:|")
    for n in ([1_000_000, 3_000_000] if a.quick else [1_000_000, 3_000_000, 10_000_000]):
        runs = []
        for _ in range(3):
            _, _, o = timed([os.path.join(BIN, "analyze_bench"), str(n)])
            runs.append(kv(o))
        m = lambda k: statistics.median(float(r[k]) for r in runs)
        md.append(f"| {n:,} | {m('load_s'):.2f} | {m('leaks_dominators_s'):.2f} | {m('total_s'):.2f} | {m('peak_heap_bytes') / 2**20:.0f} | {m('bytes_per_alloc'):.0f} |")
    md.append("")
    shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(ROOT, "BENCHMARKS.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    sh([sys.executable, os.path.join(HERE, "goals.py")])


if __name__ == "__main__":
    main()
