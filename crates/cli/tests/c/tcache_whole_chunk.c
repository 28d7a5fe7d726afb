/* A thread's per-thread cache in a chunk 16 bytes larger than its own
   (0x2a0, not 0x290): glibc carves the cache from a free chunk whose
   remainder would be under 32 bytes, and then gives it whole. Thread A
   leaves such a free chunk in its arena and ends; thread B, reusing the
   arena, gets its cache there, and fills it with freed chunks (which are
   not live). Writes "ADDRESS USABLE" of every block it holds to argv[1],
   then stops itself (SIGSTOP) for attach or gcore. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEEP 100
static void *keep[KEEP + 2];
static void *g0;
static const char *told;

static void *a(void *arg) {
    (void)arg;
    g0 = malloc(2000);               /* right after A's cache; freed by main */
    keep[KEEP] = malloc(16);         /* held: g0 apart from x */
    void *x = malloc(0x290);         /* a chunk of 0x2a0 */
    keep[KEEP + 1] = malloc(16);     /* held: x apart from what follows */
    void *f[7];
    for (int i = 0; i < 7; i++) f[i] = malloc(0x290);
    for (int i = 0; i < 7; i++) free(f[i]); /* A's cache list of 0x2a0 is full */
    free(x);                                /* to the arena's unsorted bin */
    return 0;
}

static void *b(void *arg) {
    (void)arg;
    /* B's first allocation makes its cache: the 0x2a0 chunk. */
    void *t[300];
    for (int i = 0; i < 300; i++) t[i] = malloc(16 + (i % 40) * 16);
    for (int i = 0; i < 300; i++) free(t[i]); /* seven of each size kept in B's cache */
    for (int i = 0; i < KEEP; i++) keep[i] = malloc(100);
    int fd = open(told, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char line[64];
    for (int i = 0; i < KEEP + 2; i++) {
        int len = snprintf(line, sizeof line, "%p %zu\n", keep[i], malloc_usable_size(keep[i]));
        if (write(fd, line, len) != len) _exit(1);
    }
    close(fd);
    int len = snprintf(line, sizeof line, "stopped %d\n", (int)getpid());
    write(2, line, len);
    raise(SIGSTOP);
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    told = argv[1];
    pthread_t ta, tb;
    if (pthread_create(&ta, NULL, a, NULL) || pthread_join(ta, NULL)) return 1;
    free(g0);
    if (pthread_create(&tb, NULL, b, NULL)) return 1;
    for (;;) pause();
}
