#!/usr/bin/env python3
"""What the viewer reads from a cold disk, request by request: the page
cache dropped (as root: /proc/sys/vm/drop_caches), `heapdump serve DUMP`
started with XDG_CACHE_HOME=XDG (its caches made beforehand), then the
first page's requests, the tree tab's rows and the suspects, each with its
time and the process's `read_bytes` so far (/proc/PID/io, MiB).

  benches/viewer_reads.py --heapdump target/release/heapdump --dump m100.hdump --caches XDG
"""
import argparse, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import viewer

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heapdump", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--caches", required=True, help="an XDG_CACHE_HOME with the dump's caches")
    ap.add_argument("--warm", action="store_true", help="keep the page cache")
    a = ap.parse_args()
    if not a.warm:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    env = dict(os.environ, XDG_CACHE_HOME=a.caches)
    t0 = time.monotonic()
    p = subprocess.Popen([a.heapdump, "serve", a.dump], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    def read_mib():
        fields = dict(l.split(": ") for l in open(f"/proc/{p.pid}/io").read().splitlines())
        return int(fields["read_bytes"]) >> 20
    try:
        line = p.stdout.readline()
        print(f"{'address printed':16} {time.monotonic() - t0:7.3f} s  read {read_mib():6d} MiB")
        base, token = line.split()[-1].split("/?token=")
        for path, q in [("/api/summary", {}), ("/api/leaks", {}), ("/api/tree", {"parent": "root", "n": 50}),
                        ("/api/rows", {"parent": "root", "sort": "retained", "offset": 0, "n": 50}), ("/api/suspects", {})]:
            dt, _ = viewer.get(base, token, path, **q)
            print(f"{path:16} {dt:7.3f} s  read {read_mib():6d} MiB")
    finally:
        p.kill()
        p.wait()

if __name__ == "__main__":
    main()
