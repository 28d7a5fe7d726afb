/* The parent keeps 1111 bytes and forks a child that keeps 2222 bytes
   and writes through a null pointer. The parent says "child PID", waits
   for it, and exits 0 when SIGSEGV ended it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
void *kept;
int main(void) {
    kept = malloc(1111);
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        kept = malloc(2222);
        memset(kept, 1, 2222);
        *(volatile int *)8 = 1;
        return 0;
    }
    printf("child %d\n", (int)c);
    fflush(stdout);
    int st = 0;
    while (waitpid(c, &st, 0) < 0) {}
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV ? 0 : 1;
}
