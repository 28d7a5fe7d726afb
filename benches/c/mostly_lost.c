/* The mostly-lost heap of issue 43: N nodes of 48 bytes, each with two
   pointers to random earlier nodes and a payload; only the last 1,024 are
   kept, in a global array, so about two thirds of the heap is definitely
   or indirectly lost (what a leak hunt opens). Raises SIGUSR2 (the dump
   signal) once built, waits for the dump to be written, frees nothing.
   Usage: mostly_lost N [DUMP_PATH_TO_WAIT_FOR] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
struct node { struct node *a, *b; long payload[4]; };
#define KEPT 1024
struct node *kept[KEPT];
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    /* The nodes' addresses while building (one block, freed before the
       dump so nothing but `kept` holds them). */
    struct node **all = malloc(n * sizeof *all);
    if (!all) return 1;
    unsigned long x = 88172645463325252ul;
    for (long i = 0; i < n; i++) {
        struct node *p = malloc(sizeof *p);
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        p->a = i ? all[x % i] : NULL;
        p->b = i ? all[(x >> 20) % i] : NULL;
        for (int k = 0; k < 4; k++) p->payload[k] = (long)(x + k);
        all[i] = p;
    }
    for (long i = 0; i < KEPT && i < n; i++) kept[i] = all[n - 1 - i];
    free(all);
    raise(SIGUSR2);
    if (argc > 2) {
        /* The signal dump is answered by the runtime's thread: wait until
           the file is complete. */
        for (int i = 0; i < 60000; i++) {
            struct stat st;
            if (stat(argv[2], &st) == 0 && st.st_size > 0) {
                usleep(20000);
                off_t last = st.st_size;
                if (stat(argv[2], &st) == 0 && st.st_size == last) break;
            }
            usleep(10000);
        }
    }
    return 0;
}
