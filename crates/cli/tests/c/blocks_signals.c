/* A thread that blocks every signal (as node's and the JVM's do) while the
   program asks for a dump (SIGUSR2) and exits. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
static volatile int ready;
void *kept;
static void *quiet(void *arg) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, 0);
    ready = 1;
    for (;;) pause();
    return arg;
}
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, quiet, 0);
    while (!ready) usleep(1000);
    kept = malloc(123);
    raise(SIGUSR2);
    sleep(1);
    return 0;
}
