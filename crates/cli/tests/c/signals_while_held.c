/* Counts the real-time signals it receives (they queue: none is merged)
   and says "ready PID"; on SIGTERM it prints how many it got and exits. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static volatile sig_atomic_t got, stop;
static void on_rt(int s) { (void)s; got++; }
static void on_term(int s) { (void)s; stop = 1; }
int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_rt;
    sigaction(SIGRTMIN, &sa, 0);
    signal(SIGTERM, on_term);
    void *keep = malloc(100);
    printf("ready %d\n", getpid());
    fflush(stdout);
    while (!stop) pause();
    printf("got %d\n", (int)got);
    free(keep);
    return 0;
}
