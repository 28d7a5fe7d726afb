/* Models of two ways the analysis could build its tables at 10^8 blocks
   (issue 43), measured in BENCHMARKS.md as "tried and not kept":

   table_models count   200 M random targets counted into 100 M counters
                        in K passes (K = 1, 2, 4, 8), each pass counting
                        one K-th of the nodes so that its counters might
                        fit a cache.
   table_models file    3 GiB filled in order by two threads: through a
                        shared mapping of an unnamed file in /tmp (as the
                        load builds a large heap's tables), then in
                        anonymous memory on huge pages.

   gcc -O2 -pthread -o table_models benches/c/table_models.c */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *table(size_t bytes) {
    void *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    madvise(p, bytes, MADV_HUGEPAGE);
    memset(p, 0, bytes);
    return p;
}

static int count(void) {
    size_t n = 100000000, e = 200000000;
    uint32_t *t = table(e * 4), *c = table((n + 1) * 4);
    uint64_t x = 88172645463325252ULL;
    for (size_t k = 0; k < e; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t[k] = x % n;
    }
    int ks[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        int K = ks[i];
        memset(c, 0, (n + 1) * 4);
        double t0 = now();
        for (int part = 0; part < K; part++) {
            uint32_t lo = (uint64_t)n * part / K, hi = (uint64_t)n * (part + 1) / K;
            for (size_t k = 0; k < e; k++) {
                uint32_t w = t[k];
                if (k + 16 < e) __builtin_prefetch(&c[t[k + 16]], 1);
                if (w >= lo && w < hi) c[w]++;
            }
        }
        printf("count in %d pass%s: %.2f s\n", K, K > 1 ? "es" : "", now() - t0);
    }
    return 0;
}

struct half {
    char *p;
    size_t len;
};

static void *fill(void *arg) {
    struct half *h = arg;
    for (size_t i = 0; i < h->len; i += 8) *(size_t *)(h->p + i) = i;
    return 0;
}

static int file(void) {
    size_t len = (size_t)3072 << 20, half = len / 2;
    for (int mode = 0; mode < 2; mode++) {
        double t0 = now();
        char *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        int fd = -1;
        if (mode == 0) {
            fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
            if (fd < 0 || ftruncate(fd, len) != 0 ||
                mmap(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
                perror("the file");
                return 1;
            }
            madvise(p, len, MADV_RANDOM);
        } else {
            madvise(p, len, MADV_HUGEPAGE);
        }
        struct half a = {p, half}, b = {p + half, half};
        pthread_t t;
        pthread_create(&t, 0, fill, &b);
        fill(&a);
        pthread_join(t, 0);
        printf("%s: %.2f s\n", mode == 0 ? "3 GiB by two threads, shared file mapping" : "3 GiB by two threads, anonymous huge pages",
               now() - t0);
        munmap(p, len);
        if (fd >= 0) close(fd);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "count") == 0) return count();
    if (argc == 2 && strcmp(argv[1], "file") == 0) return file();
    fprintf(stderr, "usage: table_models count|file\n");
    return 2;
}
