#!/usr/bin/env python3
"""The viewer on a big dump (issue 23): how long `heapdump serve` takes to
print its address (the dump loaded), how long the page's first requests
take (the page, its script and styles, the summary, the leak summary, the
dominator tree's first page), and how long each expansion of a tree node
takes (the children of the largest nodes, three levels down, each node
expanded for the first time), the block page, and the tree tab as app.js
loads it (/api/rows of the root: siblings grouped, lists collapsed) with
its largest group opened, and /api/suspects (app.js's default tab). Run once with no caches (a fresh
XDG_CACHE_HOME: the first analysis of the dump) and once more with the
caches the first run left (once its cache writers are done).

  benches/viewer.py --heapdump target/release/heapdump --dump d10.hdump [--rounds 3]

The dump of issue 18's dense heap at 10 M blocks:
  gcc -O2 -o dense benches/c/dense.c
  heapdump run --mode compact --no-at-exit -o d10.hdump -- ./dense 10000000 d10.hdump
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time, urllib.request

def get(base, token, path, **q):
    q["token"] = token
    url = f"{base}{path}?" + "&".join(f"{k}={v}" for k, v in q.items())
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=600) as r:
        body = r.read()
    return time.monotonic() - t0, body

NICE = None

def one(heapdump, dump, cache):
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    cmd = [heapdump, "serve", dump]
    if NICE is not None:
        # kernel.sched_autogroup_enabled=1: nice weighs only inside a
        # session, so the viewer gets a session, its autogroup at NICE too.
        cmd = ["setsid", "sh", "-c", f'echo {NICE} > /proc/self/autogroup; exec nice -n {NICE} "$@"', "sh"] + cmd
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        line = p.stdout.readline()
        started = time.monotonic() - t0
        url = line.split()[-1]
        base, token = url.split("/?token=")
        first = 0.0
        for path, q in [("/", {}), ("/app.js", {}), ("/app.css", {}), ("/api/summary", {}), ("/api/leaks", {}),
                        ("/api/tree", {"parent": "root", "n": 50})]:
            dt, body = get(base, token, path, **q)
            first += dt
            if path == "/api/tree":
                root = json.loads(body)
        # Expansions: the three largest nodes at each of three levels.
        exp = []
        level = [n for n in root["nodes"] if n["children"] > 0][:3]
        for _ in range(3):
            nxt = []
            for n in level:
                dt, body = get(base, token, "/api/tree", parent=n["address"], n=50)
                exp.append(dt)
                nxt += [c for c in json.loads(body)["nodes"] if c["children"] > 0][:1]
            level = nxt[:3]
            if not level:
                break
        dt, _ = get(base, token, "/api/block", address=root["nodes"][0]["address"], n=100)
        # The tree tab as app.js opens it: /api/rows of the root (grouped,
        # lists collapsed), then the largest group's members or, with no
        # group, the largest row's children (the first expansion a user
        # makes); then the suspects, the page app.js opens by default.
        rows_t, body = get(base, token, "/api/rows", parent="root", sort="retained", offset=0, n=50)
        top = json.loads(body)["rows"]
        grp = next((r for r in top if r["kind"] == "group"), None)
        if grp is not None:
            open_t, _ = get(base, token, "/api/rows", parent="root", group=grp["group"], sort="retained", offset=0, n=50)
        else:
            r = next((r for r in top if r["children"] > 0), top[0])
            q = {"chain": r["address"]} if r["kind"] == "chain" else {"parent": r["address"]}
            open_t, _ = get(base, token, "/api/rows", sort="retained", offset=0, n=50, **q)
        sus_t, _ = get(base, token, "/api/suspects")
        return started, first, exp, dt, rows_t, open_t, sus_t
    finally:
        p.kill()
        p.wait()

def writers_done(cache):
    """Waits until the first run's cache writers (forked children that
    outlive the viewer) have renamed their temporary files into place: at
    100 M blocks they write for minutes, and a second run started meanwhile
    waits for them, then computes its own, measuring no caches at all."""
    while any(n.endswith(".tmp") for _, _, ns in os.walk(cache) for n in ns):
        time.sleep(0.5)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heapdump", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nice", type=int, help="run the viewer at this nice, in a session (autogroup) of its own")
    ap.add_argument("--caches", help="only runs from the caches in this XDG_CACHE_HOME (made beforehand)")
    a = ap.parse_args()
    global NICE
    NICE = a.nice
    rows = {"no caches": [], "caches": []}
    if a.caches:
        del rows["no caches"]
        for _ in range(a.rounds):
            rows["caches"].append(one(a.heapdump, a.dump, a.caches))
            writers_done(a.caches)
    for _ in range(0 if a.caches else a.rounds):
        with tempfile.TemporaryDirectory() as cache:
            rows["no caches"].append(one(a.heapdump, a.dump, cache))
            writers_done(cache)
            rows["caches"].append(one(a.heapdump, a.dump, cache))
            writers_done(cache)
    print(f"| {os.path.basename(a.dump)} | address printed (s) | first page's requests (s) | to the first page (s) | expansion, median (ms) | expansion, slowest (ms) | block page (ms) "
          f"| tree tab /api/rows (s) | its largest group opened (ms) | /api/suspects (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, rs in rows.items():
        med = lambda xs: statistics.median(xs)
        exps = [e for r in rs for e in r[2]]
        print(f"| {k} | {med([r[0] for r in rs]):.2f} | {med([r[1] for r in rs]):.2f} | {med([r[0] + r[1] for r in rs]):.2f} "
              f"| {1000 * med(exps):.0f} | {1000 * max(exps):.0f} | {1000 * med([r[3] for r in rs]):.0f} "
              f"| {med([r[4] for r in rs]):.2f} | {1000 * med([r[5] for r in rs]):.0f} | {med([r[6] for r in rs]):.2f} |")

if __name__ == "__main__":
    sys.exit(main())
