/* The dense heap of issue 18 (N nodes of 48 bytes, two pointers each to
   random earlier nodes, held from a global array) beside a data file
   mapped whole, read-only, at offset 0 (issue 37): then the program says
   "ready PID" and stops itself for `heapdump attach`; SIGCONT ends it.
   Usage: dense_mapped N [FILE] */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
struct node { struct node *a, *b; long payload[4]; };
struct node **all;
const char *data;
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    if (argc > 2) {
        int fd = open(argv[2], O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) return 3;
        data = mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (data == MAP_FAILED) return 4;
    }
    all = malloc(n * sizeof *all);
    unsigned long x = 88172645463325252ul;
    for (long i = 0; i < n; i++) {
        struct node *p = malloc(sizeof *p);
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        p->a = i ? all[x % i] : NULL;
        p->b = i ? all[(x >> 20) % i] : NULL;
        for (int k = 0; k < 4; k++) p->payload[k] = (long)(x + k);
        all[i] = p;
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    raise(SIGSTOP);
    return 0;
}
