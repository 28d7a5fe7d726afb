/* What this machine's memory costs the analysis (issue 43): the numbers
   that decide whether a pass over tables of 10^7 or 10^8 entries can be
   linear in their size here.

   1. A read at random that waits for the one before (a chain through a
      shuffled table: the dominators' walk and eval), and reads at random
      that do not wait (the predecessor lists' counts and fills), by the
      table's size, on huge pages (as the analysis asks) or small ones.
   2. The first touch of fresh memory, by the second, on huge pages or
      small ones, at once and again after the memory was given back
      (a VM whose host backs a guest's page at its first touch, and takes
      back what the guest frees, charges the first and not the second).

   Usage: machine_memory [MiB ...]   (default: 160 1600 4800)
          machine_memory --reuse */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void *fresh(size_t bytes, int huge) {
    void *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

static void reads(size_t mib, int huge) {
    size_t n = (mib << 20) / 8;
    uint64_t *t = fresh(n * 8, huge);
    /* One cycle through every entry (Sattolo's shuffle), so the chain
       never settles in a short loop the caches hold. */
    for (size_t i = 0; i < n; i++) t[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = next() % i;
        uint64_t x = t[i];
        t[i] = t[j];
        t[j] = x;
    }
    const size_t steps = 20000000;
    size_t x = 0;
    double t0 = now();
    for (size_t i = 0; i < steps; i++) x = t[x];
    double dependent = now() - t0;
    uint64_t sum = 0;
    t0 = now();
    for (size_t i = 0; i < steps; i++) sum += t[next() % n];
    double independent = now() - t0;
    printf("random reads, %5zu MiB table, %s pages: %6.1f ns each waiting for the last, %5.1f ns each not (%zu %llu)\n", mib,
           huge ? "huge " : "small", dependent / steps * 1e9, independent / steps * 1e9, x, (unsigned long long)sum);
    munmap(t, n * 8);
}

/* Fresh memory of `bytes` mapped, each page touched once, given back:
   the touch's seconds a GiB. */
static double touch_rate(size_t bytes, int huge) {
    char *p = fresh(bytes, huge);
    double t0 = now();
    for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
    double d = now() - t0;
    munmap(p, bytes);
    return d / ((double)bytes / (1 << 30));
}

static void touches(size_t mib, int huge) {
    for (int again = 0; again < 2; again++)
        printf("first touch, %5zu MiB, %s pages, %s: %.2f s a GiB\n", mib, huge ? "huge " : "small",
               again ? "memory this process just gave back" : "fresh memory      ", touch_rate(mib << 20, huge));
}

/* 3. (`--reuse`) How soon memory given back must be taken again to cost
   nothing: fresh memory touched, given back, and touched again after a
   gap of 0, 1, 3 and 6 s (a guest's free page reporting hands the freed
   pages to the host some seconds after); then fresh memory by size, on
   small pages and huge ones (small pages come first from the guest's
   free blocks below 2 MiB, which reporting leaves alone: cheap until
   they run out). Each measure waits 8 s first, so that the last one's
   memory has been reported. */
static void reuse(void) {
    const double gaps[] = {0, 1, 3, 6};
    for (int i = 0; i < 4; i++) {
        sleep(8);
        touch_rate(1024 << 20, 1);
        usleep((useconds_t)(gaps[i] * 1e6));
        printf("touched again %.0f s after it was given back, 1024 MiB, huge pages: %.2f s a GiB\n", gaps[i],
               touch_rate(1024 << 20, 1));
    }
    const size_t mibs[] = {1024, 6144};
    for (int i = 0; i < 2; i++)
        for (int huge = 0; huge < 2; huge++) {
            sleep(8);
            printf("first touch, %5zu MiB, %s pages, fresh memory: %.2f s a GiB\n", mibs[i], huge ? "huge " : "small",
                   touch_rate(mibs[i] << 20, huge));
        }
}

int main(int argc, char **argv) {
    size_t sizes[16] = {160, 1600, 4800};
    int count = 3;
    if (argc > 1 && strcmp(argv[1], "--reuse") == 0) {
        reuse();
        return 0;
    }
    if (argc > 1) {
        count = 0;
        for (int i = 1; i < argc && count < 16; i++) sizes[count++] = strtoul(argv[i], 0, 10);
    }
    for (int i = 0; i < count; i++) reads(sizes[i], 1);
    reads(sizes[count > 1 ? 1 : 0], 0);
    touches(2000, 1);
    touches(2000, 0);
    return 0;
}
