#!/usr/bin/env python3
"""Paired: benches/attach_allocators.py's musl program (dense_mapped.c, musl-gcc),
each round attaching with A then B (order alternating) to the same stopped process.
benches/attach_allocators_paired.py A B SIZES ROUNDS [allocators, default musl]"""
import os, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attach_allocators import attach, ALLOCATORS
a, b, sizes, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
only = sys.argv[5].split(",") if len(sys.argv) > 5 else ["musl"]
with tempfile.TemporaryDirectory() as tmp:
    progs = {}
    for cc in ("gcc", "musl-gcc"):
        progs[cc] = os.path.join(tmp, "dm-" + cc)
        subprocess.run([cc, "-O2", "-o", progs[cc], os.path.join(os.path.dirname(os.path.abspath(__file__)), "c", "dense_mapped.c")], check=True)
    print("| blocks | allocator | hold A / B (s) | peak A / B (MiB) | peak B/A (median of pairs) | hold B/A | blocks A / B |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n in map(int, sizes.split(",")):
        for name, env, cc in ALLOCATORS:
            if name not in only: continue
            p = subprocess.Popen([progs[cc], str(n)], stdout=subprocess.PIPE, text=True, env=dict(os.environ, **env))
            pid = int(p.stdout.readline().split()[1])
            ga, gb = [], []
            for r in range(rounds):
                if r % 2 == 0:
                    ga.append(attach(a, pid, tmp)); gb.append(attach(b, pid, tmp))
                else:
                    gb.append(attach(b, pid, tmp)); ga.append(attach(a, pid, tmp))
            subprocess.run(["kill", "-CONT", str(pid)]); p.wait()
            med = statistics.median
            print(f"| {n:,} | {name} | {med(g[0] for g in ga):.3f} / {med(g[0] for g in gb):.3f} | {med(g[1] for g in ga)/(1<<20):.0f} / {med(g[1] for g in gb)/(1<<20):.0f} | {med(y[1]/x[1] for x, y in zip(ga, gb)):.3f} | {med(y[0]/x[0] for x, y in zip(ga, gb)):.3f} | {ga[0][2]:,} / {gb[0][2]:,} |", flush=True)
