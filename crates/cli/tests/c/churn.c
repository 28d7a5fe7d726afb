/* Four threads allocate and free without pause, each a ring of 1000
   blocks of random sizes filled with a pattern; main says "ready PID" and
   waits (once every ring is full). On SIGTERM the threads stop and the program exits 3 if a block
   was damaged, else 0. Live: 4000 ring blocks, stdout's buffer, the
   threads' four DTVs. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static volatile sig_atomic_t stop;
static volatile int damaged;
static int full; /* threads whose ring is full */
static void on_term(int s) { (void)s; stop = 1; }
static void *work(void *arg) {
    unsigned long x = 88172645463325252ul + (long)arg;
    void *ring[1000] = {0};
    size_t sizes[1000] = {0};
    int filled = 0, counted = 0;
    for (unsigned long n = 0; !stop; n++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int k = x % 1000;
        if (ring[k]) {
            unsigned char *p = ring[k];
            for (size_t i = 0; i < sizes[k]; i++) if (p[i] != (unsigned char)(k + i)) damaged = 1;
            free(ring[k]);
        }
        sizes[k] = 16 + (x >> 20) % 2000;
        unsigned char *p = malloc(sizes[k]);
        for (size_t i = 0; i < sizes[k]; i++) p[i] = (unsigned char)(k + i);
        if (!ring[k]) filled++;
        ring[k] = p;
        if (filled == 1000 && !counted) { counted = 1; __atomic_add_fetch(&full, 1, __ATOMIC_SEQ_CST); }
    }
    return 0;
}
int main(void) {
    signal(SIGTERM, on_term);
    pthread_t th[4];
    for (long t = 0; t < 4; t++) pthread_create(&th[t], 0, work, (void *)t);
    while (__atomic_load_n(&full, __ATOMIC_SEQ_CST) < 4) usleep(1000);
    printf("ready %d\n", getpid()); fflush(stdout);
    for (int t = 0; t < 4; t++) pthread_join(th[t], 0);
    return damaged ? 3 : 0;
}
