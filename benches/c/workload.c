/* The C workload of BENCHMARKS.md: the same shape as the Rust one (small
   blocks, strings, growing arrays, two churning threads). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t xs(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

static void *churn(void *arg) {
    uint64_t s = (uint64_t)(uintptr_t)arg;
    void *slots[4096] = {0};
    for (long r = 0; r < 2000000; r++) {
        uint64_t x = xs(&s);
        int i = x % 4096;
        if (slots[i]) { free(slots[i]); slots[i] = 0; }
        else slots[i] = calloc(1, 16 + (x >> 40) % 256);
    }
    for (int i = 0; i < 4096; i++) free(slots[i]);
    return 0;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, 0, churn, (void *)1);
    pthread_create(&b, 0, churn, (void *)2);
    long n = 1500000;
    uint64_t **boxes = malloc(n * sizeof *boxes);
    for (long i = 0; i < n; i++) { boxes[i] = malloc(8); *boxes[i] = i; }
    long ns = 500000;
    char **strs = malloc(ns * sizeof *strs);
    char buf[64];
    for (long i = 0; i < ns; i++) { snprintf(buf, sizeof buf, "key-%ld", i); strs[i] = strdup(buf); }
    long nv = 20000;
    uint32_t **vecs = malloc(nv * sizeof *vecs);
    for (long i = 0; i < nv; i++) {
        uint32_t *v = 0; size_t cap = 0, len = 0;
        for (uint32_t j = 0; j < i % 200; j++) {
            if (len == cap) { cap = cap ? cap * 2 : 4; v = realloc(v, cap * sizeof *v); }
            v[len++] = j;
        }
        vecs[i] = v;
    }
    pthread_join(a, 0); pthread_join(b, 0);
    for (long i = 0; i < n; i++) free(boxes[i]);
    for (long i = 0; i < ns; i++) free(strs[i]);
    for (long i = 0; i < nv; i++) free(vecs[i]);
    free(boxes); free(strs); free(vecs);
    return 0;
}
