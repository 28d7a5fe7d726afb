# Appends to a dict in four phases and dumps itself (SIGUSR2) after each;
# argv[1]: the -o path of `heapdump run` (later dumps get .<pid>.<n>).
import os, signal, sys, time
out = sys.argv[1]
stem, ext = os.path.splitext(out)
cache = {}
def wait(k):
    name = out if k == 0 else f"{stem}.{os.getpid()}.{k}{ext}"
    for _ in range(4000):
        if os.path.exists(name) and os.path.getsize(name) > 0: break
        time.sleep(0.005)
    time.sleep(0.02)
n = 0
for phase in range(4):
    for i in range(20000):
        cache["key%d" % n] = "value %d" % n * 3
        n += 1
    os.kill(os.getpid(), signal.SIGUSR2)
    wait(phase)
