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

A command may carry its options ("top --peak", "retained --by site"), and
these words in it are replaced: {out} by a fresh path in a scratch
directory (an export's output, its size reported and the file removed
after), {addr} by the address of the block that retains most (for `path`),
{dump} by the dump (then it is not appended: `diff {dump} {dump}`). Three
commands are run as a user would: `serve` (the viewer started, its first
page, the tree tab's rows and the suspects asked for, then stopped: its
peak over that session), `check` (benches/c/mostly_lost.c run traced to
its exit dump and checked: the check process's own memory, the program's
is a child's) and `growth` (the dump given twice). `--commands all` runs
every analysis command of the command line (the list ALL below).

  benches/lost.py --heapdump target/release/heapdump [--baseline OLD/heapdump] \\
      [--n 10000000] [--rounds 3] [--commands leaks,retained] [--modes no-cache,first,second]
"""
import argparse, contextlib, fcntl, json, os, shutil, statistics, subprocess, sys, tempfile, threading, time, urllib.request

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


def measure(cmd, env, session=None, any_exit=False):
    """(wall s, cpu s, peak RssAnon bytes) of `cmd`, its output discarded;
    with `session`, its standard output is a pipe handed to session(p),
    and the command is ended (SIGTERM) when the session returns."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE if session else subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                         text=bool(session))
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_anon(p.pid))
            time.sleep(0.002)

    t = threading.Thread(target=sample)
    t.start()
    if session:
        try:
            session(p)
        finally:
            p.terminate()
    # Read stderr while waiting: a long message must not block the command.
    err = []
    reader = threading.Thread(target=lambda: err.append(p.stderr.read()))
    reader.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    done.set()
    t.join()
    reader.join()
    code = os.waitstatus_to_exitcode(status)
    if code != 0 and not any_exit and not session:
        # A question this dump cannot answer (`top --peak` of a dump
        # without sites): said, and the others go on.
        msg = err[0] if isinstance(err[0], str) else err[0].decode()
        print(f"{' '.join(cmd)}: exit {code}: {msg.strip()}", file=sys.stderr, flush=True)
        return None
    return wall, ru.ru_utime + ru.ru_stime, peak[0]


def get(base, token, path, **q):
    q["token"] = token
    url = f"{base}{path}?" + "&".join(f"{k}={v}" for k, v in q.items())
    with urllib.request.urlopen(url, timeout=600) as r:
        return r.read()


def viewer_session(p):
    """The viewer's first page as app.js asks for it, the tree tab's rows
    and the suspects (its default tab)."""
    url = p.stdout.readline().split()[-1]
    base, token = url.split("/?token=")
    for path, q in [("/", {}), ("/api/summary", {}), ("/api/leaks", {}), ("/api/tree", {"parent": "root", "n": 50}),
                    ("/api/rows", {"parent": "root", "sort": "retained", "offset": 0, "n": 50}), ("/api/suspects", {})]:
        get(base, token, path, **q)


# Every analysis command of the command line (DESIGN.md's contract), as
# `--commands all` runs them.
ALL = ["summary", "top", "top --by type", "top --by size", "top --tree", "top --peak", "top --allocated", "leaks",
       "leaks --kind reachable", "retained", "retained --by site", "retained --by type", "path {dump} {addr}",
       "path --all {dump} {addr}", "diff {dump} {dump}", "growth {dump} {dump}"] + \
      [f"export --format {f} -o {{out}}" for f in ["pprof", "heapsnapshot", "folded", "svg", "dot", "mermaid", "json", "parquet"]] + \
      ["report -o {out}", "serve", "check"]


@contextlib.contextmanager
def locked(path):
    """Holds `path`'s flock (as flock(1) would), when one is given: the
    machine's heavy runs one at a time."""
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def size_of(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path) if os.path.exists(path) else 0


def argv(hd, item, dump, ctx, no_cache):
    """The command line of one `--commands` item, and how to run it."""
    words = item.split()
    if words[0] == "check":
        # The program raises the dump signal once built; check gives it no
        # handler, so it is ignored (an ignored signal stays so across exec).
        prog = ctx["prog"]()
        return [hd, "check", "--mode", "compact", "--", "sh", "-c", 'trap "" USR2; exec "$0" "$@"', prog, str(ctx["n"])], \
            dict(any_exit=True)
    out = os.path.join(ctx["scratch"], "out")
    words = [w.replace("{out}", out).replace("{dump}", dump).replace("{addr}", ctx["addr"]() if w == "{addr}" else w)
             for w in words]
    cmd = [hd, words[0]] + (["--no-cache"] if no_cache else []) + words[1:] + ([] if "{dump}" in item else [dump])
    return cmd, dict(session=viewer_session) if words[0] == "serve" else {}


def wait_for_writers(cache):
    t0 = time.monotonic()
    while any(f.endswith(".tmp") for _, _, fs in os.walk(cache) for f in fs) and time.monotonic() - t0 < 300:
        time.sleep(0.01)


def run_modes(hd, command, dump, modes, ctx):
    out = {}
    out_path = os.path.join(ctx["scratch"], "out")

    def one(no_cache, env):
        cmd, kw = argv(hd, command, dump, ctx, no_cache)
        with locked(ctx["lock"]):
            v = measure(cmd, env, **kw)
        ctx["sizes"][command] = max(ctx["sizes"].get(command, 0), size_of(out_path))
        shutil.rmtree(out_path) if os.path.isdir(out_path) else os.path.exists(out_path) and os.remove(out_path)
        return v

    if command.split()[0] == "check":
        # check keeps no caches: one mode.
        v = one(False, dict(os.environ))
        return {"no-cache": v} if v else {}
    if "no-cache" in modes:
        out["no-cache"] = one(True, dict(os.environ))
        if out["no-cache"] is None:
            return {}
    if "first" in modes or "second" in modes:
        cache = tempfile.mkdtemp()
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        first = one(False, env)
        wait_for_writers(cache)
        if "first" in modes:
            out["first"] = first
        if "second" in modes and first is not None:
            out["second"] = one(False, env)
        shutil.rmtree(cache)
    return {m: v for m, v in out.items() if v is not None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heapdump", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commands", default="leaks,retained")
    ap.add_argument("--modes", default="no-cache,first,second")
    ap.add_argument("--dump", help="use this dump instead of making one")
    ap.add_argument("--lock", help="run each command holding this file's flock (a 100 M dump's runs, one at a time on the machine)")
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
        with locked(a.lock):
            s = json.loads(subprocess.run([a.heapdump, "summary", "--json", "--no-cache", dump], capture_output=True, text=True,
                                          check=True).stdout)
        n = s["allocations"]
        print(f"{n:,} blocks; dump held {s['pause_us'] / 1e6:.2f} s; file {os.path.getsize(dump) / 2**20:.0f} MiB "
              f"({os.path.getsize(dump) / n:.1f} B per block); load {os.getloadavg()[0]:.1f}", flush=True)
        scratch = os.path.join(tmp, "scratch")
        os.mkdir(scratch)
        memo = {}

        def addr():
            if "addr" not in memo:
                with locked(a.lock):
                    top = json.loads(subprocess.run([a.heapdump, "retained", "--json", "-n", "1", "--no-cache", dump],
                                                    capture_output=True, text=True, check=True).stdout)
                memo["addr"] = top[0]["address"]
            return memo["addr"]

        def prog():
            if "prog" not in memo:
                memo["prog"] = os.path.join(tmp, "mostly_lost_check")
                subprocess.run(["gcc", "-O2", "-o", memo["prog"], os.path.join(here, "c", "mostly_lost.c")], check=True)
            return memo["prog"]

        ctx = dict(scratch=scratch, addr=addr, prog=prog, n=n, sizes={}, lock=a.lock)
        if commands == ["all"]:
            commands = ALL
        got = {}
        for r in range(a.rounds):
            order = tools if r % 2 == 0 else tools[::-1]
            for c in commands:
                for t, hd in order:
                    for m, v in run_modes(hd, c, dump, modes, ctx).items():
                        got.setdefault((c, m), {}).setdefault(t, []).append(v)
                        print(f"  {t} {c} {m}: {v[0]:.2f} s, CPU {v[1]:.2f} s, {v[2] / n:.1f} B per block "
                              f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
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
            if ctx["sizes"].get(c):
                row += f" output {ctx['sizes'][c] / 2**20:.0f} MiB"
            print(row, flush=True)


if __name__ == "__main__":
    main()
