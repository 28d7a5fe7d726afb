/* A forked child that does nothing but allocate and free (so a signal
   often lands inside the allocator), until a signal ends it. The parent
   says "child PID" on stdout, waits for it, and exits 0 when SIGTERM
   ended it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
void *volatile sink;
int main(void) {
    pid_t c = fork();
    if (c == 0) {
        for (;;) { sink = malloc(64); free(sink); }
    }
    printf("child %d\n", (int)c);
    fflush(stdout);
    int st = 0;
    while (waitpid(c, &st, 0) < 0) {}
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM ? 0 : 1;
}
