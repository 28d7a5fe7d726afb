/* A heap with a hub (issue 43): N nodes of 32 bytes, each pointing to one
   shared block and to a random earlier node, all held from a global
   array. One block with N predecessors, as every instance of a class
   points to its type, every request to its server's context: the shape
   on which two threads filling the predecessor lists fought over one
   list's end (see BENCHMARKS.md).

   Usage: hub N    (then a signal dump: heapdump run --mode compact
                    --no-at-exit -o hub.hdump -- ./hub 10000000) */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct node {
    void *hub;
    struct node *prev;
    uint64_t pad[2];
};

struct node **all;

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: hub N\n");
        return 2;
    }
    size_t n = strtoul(argv[1], 0, 10);
    void *hub = malloc(64);
    all = malloc(n * sizeof *all);
    if (!hub || !all) return 1;
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 0; i < n; i++) {
        struct node *k = malloc(sizeof *k);
        if (!k) return 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        k->hub = hub;
        k->prev = i ? all[x % i] : 0;
        all[i] = k;
    }
    raise(SIGUSR2);
    return 0;
}
