#!/usr/bin/env python3
"""The viewer on a big dump (issue 23): how long `heapdump serve` takes to
print its address (the dump loaded), how long the page's first requests
take (the page, its script and styles, the summary, the leak summary, the
dominator tree's first page), and how long each expansion of a tree node
takes (the children of the largest nodes, three levels down, each node
expanded for the first time). Run once with no caches (a fresh
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

def one(heapdump, dump, cache):
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    t0 = time.monotonic()
    p = subprocess.Popen([heapdump, "serve", dump], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
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
        return started, first, exp, dt
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
    a = ap.parse_args()
    rows = {"no caches": [], "caches": []}
    for _ in range(a.rounds):
        with tempfile.TemporaryDirectory() as cache:
            rows["no caches"].append(one(a.heapdump, a.dump, cache))
            writers_done(cache)
            rows["caches"].append(one(a.heapdump, a.dump, cache))
            writers_done(cache)
    print(f"| {os.path.basename(a.dump)} | address printed (s) | first page's requests (s) | to the first page (s) | expansion, median (ms) | expansion, slowest (ms) | block page (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k, rs in rows.items():
        med = lambda xs: statistics.median(xs)
        exps = [e for r in rs for e in r[2]]
        print(f"| {k} | {med([r[0] for r in rs]):.2f} | {med([r[1] for r in rs]):.2f} | {med([r[0] + r[1] for r in rs]):.2f} "
              f"| {1000 * med(exps):.0f} | {1000 * max(exps):.0f} | {1000 * med([r[3] for r in rs]):.0f} |")

if __name__ == "__main__":
    sys.exit(main())
