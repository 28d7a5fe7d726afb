/* Installs its own handler for SIGRTMIN+5 (the runtime's first choice of
   stop signal) after start-up, runs two threads, raises the dump signal
   and waits for the dump; then prints how many SIGRTMIN+5 it received.
   The runtime used to send it its stop signals (five in a test) and every
   dump stalled 2 s with every thread "not stopped". */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static volatile sig_atomic_t mine, done;
static void on_mine(int s) { (void)s; mine++; }
static void *spin(void *a) { (void)a; while (!done) usleep(1000); return NULL; }
int main(int argc, char **argv) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_mine;
    sigaction(SIGRTMIN + 5, &sa, NULL);
    void *keep = malloc(1000);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, spin, NULL);
    raise(SIGUSR2);
    /* Wait for the signal dump: its file appears complete (argv[1]). */
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(argv[1], "rb");
        if (f) { fseek(f, 0, SEEK_END); long n = ftell(f); fclose(f); if (n > 100) break; }
        usleep(10000);
    }
    usleep(200000);
    done = 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("%d\n", (int)mine);
    return keep == NULL;
}
