/* The main thread blocks every signal and holds a block only in a local
   while it waits in the kernel; another thread asks for the dump. The
   main thread cannot be stopped, and its stack was not a root: the block
   it holds came out "definitely lost". */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static volatile int waiting;
static void *asker(void *a) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_UNBLOCK, &all, 0);
    while (!waiting) usleep(1000);
    usleep(50000);
    raise(SIGUSR2);
    return a;
}
__attribute__((noinline)) static void hold(void) {
    char *volatile mine = malloc(777);
    memset(mine, 1, 777);
    waiting = 1;
    struct timespec ts = { 1, 0 };
    nanosleep(&ts, 0);
    free(mine);
}
int main(void) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, 0);
    pthread_t t;
    pthread_create(&t, 0, asker, 0);
    hold();
    pthread_join(t, 0);
    return 0;
}
