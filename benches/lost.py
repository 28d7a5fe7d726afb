#!/usr/bin/env python3
"""The leak hunt's heap (issue 43): benches/c/mostly_lost.c builds N nodes
of 48 bytes, each with two pointers to random earlier nodes, keeps the last
1,024 from a global array and drops the rest (most of the heap definitely
or indirectly lost). One compact signal dump of it, then each analysis
command on it, timed and measured:

- wall and CPU (user + system) to the answer;
- peak anonymous memory (RssAnon, sampled every 2 ms from /proc: what the
  command itself holds; the mapped dump and cache files are not in it),
  per block;

first as `--no-cache` (the first question, nothing written), then the
first question with caches (a fresh XDG_CACHE_HOME, the writers waited
for), then a second question from them. With --baseline, each round runs
both builds back to back, alternating which goes first, and the table gives
per measure the medians and the median of the ratio new/baseline within
rounds. The dump's hold (`pause_us`) and file size are reported beside.

  benches/lost.py --heapdump target/release/heapdump [--baseline OLD/heapdump] \\
      [--n 10000000] [--rounds 3] [--commands leaks,retained] [--modes no-cache,first,second]
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, threading, time

here = os.path.dirname(os.path.abspath(__file__))


def rss_anon(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure(cmd, env):
    """(wall s, cpu s, peak RssAnon bytes) of `cmd`, its output discarded."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_anon(p.pid))
            time.sleep(0.002)

    t = threading.Thread(target=sample)
    t.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    done.set()
    t.join()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)}: exit {os.waitstatus_to_exitcode(status)}: {p.stderr.read().decode()}")
    return wall, ru.ru_utime + ru.ru_stime, peak[0]


def wait_for_writers(cache):
    t0 = time.monotonic()
    while any(f.endswith(".tmp") for _, _, fs in os.walk(cache) for f in fs) and time.monotonic() - t0 < 300:
        time.sleep(0.01)


def run_modes(hd, command, dump, modes):
    out = {}
    if "no-cache" in modes:
        out["no-cache"] = measure([hd, command, "--no-cache", dump], dict(os.environ))
    if "first" in modes or "second" in modes:
        cache = tempfile.mkdtemp()
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        first = measure([hd, command, dump], env)
        wait_for_writers(cache)
        if "first" in modes:
            out["first"] = first
        if "second" in modes:
            out["second"] = measure([hd, command, dump], env)
        shutil.rmtree(cache)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heapdump", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commands", default="leaks,retained")
    ap.add_argument("--modes", default="no-cache,first,second")
    ap.add_argument("--dump", help="use this dump instead of making one")
    a = ap.parse_args()
    commands, modes = a.commands.split(","), a.modes.split(",")
    tools = [("new", a.heapdump)] + ([("baseline", a.baseline)] if a.baseline else [])
    with tempfile.TemporaryDirectory() as tmp:
        dump = a.dump
        if not dump:
            prog = os.path.join(tmp, "mostly_lost")
            subprocess.run(["gcc", "-O2", "-o", prog, os.path.join(here, "c", "mostly_lost.c")], check=True)
            dump = os.path.join(tmp, "lost.hdump")
            subprocess.run([a.heapdump, "run", "--mode", "compact", "--no-at-exit", "-o", dump, "--", prog, str(a.n), dump],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        s = json.loads(subprocess.run([a.heapdump, "summary", "--json", "--no-cache", dump], capture_output=True, text=True,
                                      check=True).stdout)
        n = s["allocations"]
        print(f"{n:,} blocks; dump held {s['pause_us'] / 1e6:.2f} s; file {os.path.getsize(dump) / 2**20:.0f} MiB "
              f"({os.path.getsize(dump) / n:.1f} B per block); load {os.getloadavg()[0]:.1f}", flush=True)
        got = {}
        for r in range(a.rounds):
            order = tools if r % 2 == 0 else tools[::-1]
            for c in commands:
                for t, hd in order:
                    for m, v in run_modes(hd, c, dump, modes).items():
                        got.setdefault((c, m), {}).setdefault(t, []).append(v)
            print(f"round {r + 1} done (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        head = "| command | mode | wall (s) | CPU (s) | RssAnon (B per block) |"
        if a.baseline:
            head += " baseline wall / CPU / B per block | new/baseline CPU (paired) |"
        print(head)
        print("|---|---|---:|---:|---:|" + ("---:|---:|" if a.baseline else ""))
        for (c, m), v in got.items():
            med = lambda t, i: statistics.median(x[i] for x in v[t])
            row = f"| {c} | {m} | {med('new', 0):.2f} | {med('new', 1):.2f} | {med('new', 2) / n:.1f} |"
            if a.baseline:
                ratio = statistics.median(x[1] / y[1] for x, y in zip(v["new"], v["baseline"]))
                row += f" {med('baseline', 0):.2f} / {med('baseline', 1):.2f} / {med('baseline', 2) / n:.1f} | {ratio:.2f} |"
            print(row, flush=True)


if __name__ == "__main__":
    main()
