/* The parent forks a child that grows by 1 MiB blocks (written to, held
   in a list) until malloc fails, then exits 0. The parent prints
   "child PID", waits for it, and exits 0 when the child did. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
struct block { struct block *next; char data[(1 << 20) - 16]; };
struct block *blocks;
int main(void) {
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        for (;;) {
            struct block *b = malloc(sizeof *b);
            if (!b) return 0;
            memset(b->data, 1, sizeof b->data);
            b->next = blocks;
            blocks = b;
        }
    }
    printf("child %d\n", (int)c);
    int st = 0;
    while (waitpid(c, &st, 0) < 0) {}
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
