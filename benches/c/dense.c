/* The dense heap of issue 18: N nodes of 48 bytes, each with two pointers
   to random earlier nodes and a payload, held from a global array; raises
   SIGUSR2 (the dump signal) once built, waits for the dump to be written,
   and frees nothing. Usage: dense N [DUMP_PATH_TO_WAIT_FOR] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
struct node { struct node *a, *b; long payload[4]; };
struct node **all;
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
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
    raise(SIGUSR2);
    if (argc > 2) {
        /* The signal dump is answered by the runtime's thread: wait until
           the report line (or the file) says it is complete. */
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
