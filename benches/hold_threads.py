#!/usr/bin/env python3
"""Issue 43: where a compact signal dump's hold goes, thread by thread.

Runs one compact dump of the mostly-lost heap (PROG: benches/c/mostly_lost.c
compiled, N nodes) under `HEAPDUMP run`, polling every thread's
/proc/PID/task/TID/schedstat every 0.1 s, and splits each thread's last
`pause_us` seconds into time on a CPU, time runnable but waiting for one
(the run queue: the others' load) and time blocked (futex, disk).

The program runs in a session of its own, its autogroup and nice value at
-15: with kernel.sched_autogroup_enabled=1 a nice value alone weighs only
against the same session's threads (see benches/hold.py --nice). Needs
root for the negative value.

  benches/hold_threads.py HEAPDUMP N OUT [PROG]

Prints the pause, the load, a line per thread and a JSON line (the pause,
the load, and the runtime's threads' CPU and run-queue seconds summed).
"""
import json, os, subprocess, sys, time

def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    heapdump, n, out = sys.argv[1], sys.argv[2], sys.argv[3]
    prog = os.path.abspath(sys.argv[4] if len(sys.argv) > 4 else "/work/ml/mostly_lost")
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.Popen(["setsid", "sh", "-c", 'echo -15 > /proc/self/autogroup; exec nice -n -15 "$@"', "sh",
                          heapdump, "run", "--mode", "compact", "--no-at-exit", "-o", out, "--", prog, n, out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    hist = {}  # tid -> [(time, on CPU ns, run queue ns, comm)]
    while p.poll() is None:
        now = time.monotonic()
        pids = subprocess.run(["pgrep", "-f", "^" + prog], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    s = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
                    c = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
                except OSError:
                    continue
                hist.setdefault(int(tid), []).append((now, int(s[0]), int(s[1]), c))
        time.sleep(0.1)
    if p.returncode != 0 or not os.path.exists(out):
        sys.exit(f"no dump: {p.stderr.read().decode()}")
    s = json.loads(subprocess.run([heapdump, "summary", "--json", out], capture_output=True, text=True, check=True).stdout)
    os.remove(out)
    pause = s["pause_us"] / 1e6
    load = os.getloadavg()[0]
    print(f"pause {pause:.2f} s, load {load:.1f}")
    tot = {"pause": pause, "load": load, "run": 0.0, "runqueue": 0.0}
    for tid, h in sorted(hist.items()):
        if len(h) < 2:
            continue
        # The dump's threads live only during it; of the others, the last
        # `pause` seconds seen (the program exits just after the dump).
        hh = [x for x in h if x[0] >= h[-1][0] - pause] or h
        a, b = hh[0], hh[-1]
        wall = b[0] - a[0]
        run, wait = (b[1] - a[1]) / 1e9, (b[2] - a[2]) / 1e9
        if b[3] == "heapdump":
            tot["run"] += run
            tot["runqueue"] += wait
        print(f"tid {tid} {b[3]:16s} span {wall:6.2f} s  on a CPU {run:6.2f}  run queue {wait:6.2f}  blocked {wall - run - wait:6.2f}")
    print("JSON", json.dumps(tot))

if __name__ == "__main__":
    main()
