/* A heap damaged on purpose, one way per argv[2], as a wild write would:
     backward     a chunk's size minus the distance to an earlier chunk,
                  with the in-use bit (a walk by sizes goes back)
     zero         a chunk's size 0
     past         a chunk's size far past the heap's end
     tcache-loop  a per-thread cache list whose chunk leads to itself
     tcache-uaf   a per-thread cache list whose second chunk's link is
                  written over (a write into a freed block): it leads to
                  a live block of another size
     fastbin-loop a fastbin whose last chunk leads back to its first
     bin-loop     a chunk in a large bin that leads to itself (the walk
                  does not follow the bins: the heap is still walked right)
     arena-next   the main arena's `next` pointing nowhere (0x2000000)
     heap-loop    a thread's arena's heap naming itself as its previous
   Writes to argv[1] the address the capture must name (the damaged chunk,
   list entry, pointer or heap), then "ADDRESS USABLE" of every live block,
   stops itself (SIGSTOP) for attach or gcore, and ends with _exit when
   continued (nothing of glibc's touches the damage again). */
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

#define N 64
static void *live[N];
static size_t usable[N]; /* taken before the damage: glibc reads the heap for it */
static int nlive;

static void keep(void *p) {
    usable[nlive] = malloc_usable_size(p);
    live[nlive++] = p;
}
/* Where glibc's safe-linking stores a pointer `to` in the field at `at`. */
static uintptr_t protect(void *at, void *to) { return ((uintptr_t)at >> 12) ^ (uintptr_t)to; }
static size_t *header(void *mem) { return (size_t *)mem - 1; }

static void *in_thread(void *arg) { (void)arg; return malloc(200); }

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *how = argv[2];
    uintptr_t named = 0;
    for (int i = 0; i < 20; i++) keep(malloc(100 + 10 * i));
    if (!strcmp(how, "backward") || !strcmp(how, "zero") || !strcmp(how, "past")) {
        char *a = live[3], *b = live[12];
        size_t dist = (size_t)(b - a);
        *header(b) = !strcmp(how, "backward") ? (size_t)0 - dist + 1 : !strcmp(how, "zero") ? 0 : ((size_t)1 << 40) + 1;
        named = (uintptr_t)b - 16;
    } else if (!strcmp(how, "tcache-loop")) {
        void *x = malloc(40), *y = malloc(40);
        free(x);
        free(y); /* the list: y, x */
        *(uintptr_t *)y = protect(y, y);
        named = (uintptr_t)y - 16;
    } else if (!strcmp(how, "tcache-uaf")) {
        void *x = malloc(40), *y = malloc(40);
        free(x);
        free(y); /* the list: y, x */
        *(uintptr_t *)x = protect(x, live[5]);
        named = (uintptr_t)live[5];
    } else if (!strcmp(how, "fastbin-loop")) {
        void *t[7], *p, *q;
        for (int i = 0; i < 7; i++) t[i] = malloc(56);
        p = malloc(56);
        q = malloc(56);
        keep(malloc(10)); /* not next to top */
        for (int i = 0; i < 7; i++) free(t[i]); /* the cache is full */
        free(p);
        free(q); /* the fastbin: q, p */
        *(uintptr_t *)p = protect(p, (char *)q - 16);
        named = (uintptr_t)q - 16;
    } else if (!strcmp(how, "bin-loop")) {
        char *a = malloc(1500);
        keep(malloc(10));
        free(a);                 /* the unsorted bin */
        keep(malloc(2000));      /* a sorted into its large bin */
        ((uintptr_t *)a)[0] = (uintptr_t)a - 16; /* fd: itself */
        named = (uintptr_t)a - 16;
    } else if (!strcmp(how, "arena-next")) {
        char *a = malloc(1500);
        keep(malloc(10));
        free(a); /* the unsorted bin, whose header is main_arena + 96 */
        uintptr_t main_arena = ((uintptr_t *)a)[0] - 96;
        *(uintptr_t *)(main_arena + 2160) = 0x2000000;
        named = 0x2000000;
    } else if (!strcmp(how, "heap-loop")) {
        pthread_t t;
        void *p;
        if (pthread_create(&t, NULL, in_thread, NULL) || pthread_join(t, &p)) return 1;
        keep(p);
        uintptr_t heap = (uintptr_t)p & ~(uintptr_t)((64 << 20) - 1);
        ((uintptr_t *)heap)[1] = heap; /* heap_info.prev */
        named = heap;
    } else {
        return 2;
    }
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char line[64];
    int len = snprintf(line, sizeof line, "%#lx\n", (unsigned long)named);
    if (fd < 0 || write(fd, line, len) != len) return 1;
    for (int i = 0; i < nlive; i++) {
        len = snprintf(line, sizeof line, "%p %zu\n", live[i], usable[i]);
        if (write(fd, line, len) != len) return 1;
    }
    close(fd);
    len = snprintf(line, sizeof line, "stopped %d\n", (int)getpid());
    write(2, line, len);
    raise(SIGSTOP);
    _exit(0);
}
