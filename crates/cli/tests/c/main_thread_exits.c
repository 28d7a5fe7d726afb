/* A process whose main thread has ended (pthread_exit) while another
   runs on: the main thread stays a zombie, with no memory map or
   executable of its own in /proc. The worker holds 100 blocks of 100
   bytes, says "stopped PID" and stops the process (SIGSTOP). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *keep[100];

static void *worker(void *arg) {
    (void)arg;
    /* Until the main thread is a zombie. */
    char path[64], stat[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)getpid());
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(path, "r");
        if (!f) break;
        size_t n = fread(stat, 1, sizeof stat - 1, f);
        fclose(f);
        stat[n] = 0;
        char *close = strrchr(stat, ')');
        if (close && close[1] == ' ' && close[2] == 'Z') break;
        usleep(10000);
    }
    for (int i = 0; i < 100; i++) keep[i] = malloc(100);
    fprintf(stderr, "stopped %d\n", (int)getpid());
    raise(SIGSTOP);
    _exit(0);
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL)) return 1;
    pthread_exit(NULL);
}
