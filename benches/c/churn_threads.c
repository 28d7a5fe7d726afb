/* Many small, short-lived allocations across threads (issue 43): T threads
   (default 4) each make R allocations (default 2,000,000) of 16-200 bytes
   from eight call sites two calls deep, each block freed 64 allocations
   later (a ring of 64 per thread), so almost nothing lives long and the
   threads allocate and free at once. Usage: churn_threads [T] [R] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 64
static uint64_t xs(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static long rounds = 2000000;

#define SITE(k) \
    __attribute__((noinline)) static void *site##k(size_t n) { void *p = malloc(n); if (p) memset(p, k, 8); return p; }
SITE(0) SITE(1) SITE(2) SITE(3) SITE(4) SITE(5) SITE(6) SITE(7)
static void *(*const sites[8])(size_t) = { site0, site1, site2, site3, site4, site5, site6, site7 };

__attribute__((noinline)) static void *make(uint64_t x) { return sites[x & 7](16 + (x >> 8) % 185); }

static void *worker(void *arg) {
    uint64_t s = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    void *ring[RING] = {0};
    for (long r = 0; r < rounds; r++) {
        int i = r % RING;
        free(ring[i]);
        ring[i] = make(xs(&s));
    }
    for (int i = 0; i < RING; i++) free(ring[i]);
    return 0;
}

int main(int argc, char **argv) {
    int t = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2) rounds = atol(argv[2]);
    if (t < 1 || t > 64) return 2;
    pthread_t th[64];
    for (int i = 0; i < t; i++) pthread_create(&th[i], 0, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < t; i++) pthread_join(th[i], 0);
    return 0;
}
