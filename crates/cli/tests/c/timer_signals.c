/* A single-threaded program with an interval timer: every SIGALRM must
   run its handler on the program's own thread. The runtime's helper
   thread used to take its share of process-directed signals, running the
   program's handler concurrently with main (a test of the tracker counted
   two blocks too many one run in ten). Prints how many handler runs were
   on another thread. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>
static volatile sig_atomic_t ticks, foreign;
static pid_t main_tid;
static void on_alarm(int s) {
    (void)s;
    ticks++;
    if ((pid_t)syscall(SYS_gettid) != main_tid) foreign++;
}
int main(void) {
    main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { { 0, 20 }, { 0, 20 } };
    setitimer(ITIMER_REAL, &it, NULL);
    /* Busy, with signals arriving faster than the handler runs: while one
       is pending for main, the kernel gives the next to another thread
       that does not block it. */
    for (int i = 0; i < 500000; i++) { void *p = malloc(64 + i % 64); free(p); }
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    printf("%d %d\n", (int)ticks, (int)foreign);
    return 0;
}
