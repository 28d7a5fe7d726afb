/* Every way into glibc's malloc, in one thread or several (argv[2]: how
   many threads besides the main one, each then in an arena of its own):
   realloc chains growing and shrinking (in place, moved, into and out of
   mapped chunks), posix_memalign up to 4096, aligned_alloc, memalign,
   valloc, pvalloc, calloc, reallocarray, realloc(NULL, n), and frees
   between them (the aligned calls leave freed chunks beside their blocks,
   the frees fill the caches, fastbins and bins). With "sbrk" as argv[3]
   the program first takes memory of its own with sbrk, so that glibc's
   heap starts above the start of the [heap] mapping. Writes "ADDRESS USABLE"
   of every live block to argv[1] (no stdio: only the program's own blocks
   are live), then stops itself (SIGSTOP) for attach or gcore; SIGCONT
   lets it exit. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS 3000
#define MAXTHREADS 8

static void *slots[MAXTHREADS + 1][SLOTS];

static uint64_t next_random(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void *work(void *arg) {
    void **s = arg;
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uintptr_t)arg;
    for (int round = 0; round < 6 * SLOTS; round++) {
        int i = next_random(&x) % SLOTS;
        size_t n = next_random(&x) % 3000 + 1;
        if (next_random(&x) % 50 == 0) n = 100000 + next_random(&x) % 300000; /* mapped, and the threshold grows */
        void *p = NULL;
        switch (next_random(&x) % 12) {
        case 0: free(s[i]); s[i] = NULL; break;
        case 1: s[i] = realloc(s[i], n); break;                 /* a chain: grows, shrinks, moves */
        case 2: free(s[i]); s[i] = realloc(NULL, n); break;
        case 3: {
            size_t align = (size_t)8 << (next_random(&x) % 10); /* 8 .. 4096 */
            free(s[i]); s[i] = NULL;
            if (posix_memalign(&p, align, n) == 0) s[i] = p;
            break;
        }
        case 4: free(s[i]); s[i] = aligned_alloc((size_t)16 << (next_random(&x) % 9), n); break;
        case 5: free(s[i]); s[i] = memalign((size_t)32 << (next_random(&x) % 8), n); break;
        case 6: free(s[i]); s[i] = calloc(next_random(&x) % 40 + 1, n / 40 + 1); break;
        case 7: free(s[i]); s[i] = reallocarray(NULL, n / 8 + 1, 8); break;
        case 8: free(s[i]); s[i] = next_random(&x) % 4 ? valloc(n) : pvalloc(n); break;
        case 9: if (s[i]) s[i] = realloc(s[i], malloc_usable_size(s[i]) / 2 + 1); break; /* shrinks in place */
        default: free(s[i]); s[i] = malloc(n % 200 + 1); break; /* the caches and fastbins */
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    if (argc > 3 && strcmp(argv[3], "sbrk") == 0) memset(sbrk(8192), 0x41, 8192);
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    if (threads > MAXTHREADS) threads = MAXTHREADS;
    pthread_t t[MAXTHREADS];
    for (int k = 0; k < threads; k++)
        if (pthread_create(&t[k], NULL, work, slots[k + 1])) return 1;
    work(slots[0]);
    for (int k = 0; k < threads; k++) pthread_join(t[k], NULL);
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 1;
    char line[64];
    for (int k = 0; k <= threads; k++)
        for (int i = 0; i < SLOTS; i++)
            if (slots[k][i]) {
                int len = snprintf(line, sizeof line, "%p %zu\n", slots[k][i], malloc_usable_size(slots[k][i]));
                if (write(fd, line, len) != len) return 1;
            }
    close(fd);
    int len = snprintf(line, sizeof line, "stopped %d\n", (int)getpid());
    write(2, line, len);
    raise(SIGSTOP);
    return 0;
}
