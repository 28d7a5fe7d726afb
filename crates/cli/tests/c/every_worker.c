/* A pre-fork server's shape for `run --every` (#41): the parent forks a
   worker that outlives the fork, growing a list by 2000 nodes every
   100 ms for 2 s, while the parent only waits for it. Prints "worker PID". */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
struct node { struct node *next; long payload[6]; };
static struct node *worker_list;
static void *parent_block;
/* A function of its own: inlined in main, the newest node stayed in a
   callee-saved register through the sleep, a root beside `worker_list`
   (see grows_slowly.c). */
__attribute__((noinline)) static int grow(int n) {
    for (int i = 0; i < n; i++) {
        struct node *x = malloc(sizeof *x);
        if (!x) return 3;
        x->next = worker_list;
        x->payload[0] = i;
        worker_list = x;
    }
    return 0;
}
int main(void) {
    parent_block = malloc(1111);
    fflush(stdout);
    pid_t c = fork();
    if (c < 0) return 2;
    if (c == 0) {
        for (int step = 0; step < 20; step++) {
            if (grow(2000)) return 3;
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, 0);
        }
        return 0;
    }
    printf("worker %d\n", (int)c);
    fflush(stdout);
    int st = 0;
    while (waitpid(c, &st, 0) < 0) {}
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
