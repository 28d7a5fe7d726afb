/* A thread that cannot stop for a while: it is in vfork(), an
   uninterruptible sleep until its child ends (argv[1] seconds). Prints
   "child PID" (from the child) and keeps allocating on the main thread. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned secs;

static void *worker(void *arg) {
    (void)arg;
    pid_t c = vfork();
    if (c == 0) {
        char line[32];
        int len = snprintf(line, sizeof line, "child %d\n", (int)getpid());
        if (write(1, line, len) != len) _exit(1);
        sleep(secs);
        _exit(0);
    }
    waitpid(c, NULL, 0);
    for (;;) pause();
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    secs = (unsigned)atoi(argv[1]);
    setvbuf(stdout, NULL, _IONBF, 0);
    void *keep[64];
    for (int i = 0; i < 64; i++) keep[i] = malloc(32 + i);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL)) return 1;
    for (unsigned i = 0;; i++) {
        free(keep[i % 64]);
        keep[i % 64] = malloc(32 + i % 64);
        usleep(1000);
    }
}
