/* The pre-fork shape (nginx, apache's prefork, gunicorn): the parent
   keeps a 1111-byte block and forks two workers; worker i keeps a block of
   3000 + i bytes, installs a SIGQUIT handler that calls exit (a graceful
   stop), says "worker I PID" on stdout and waits for signals. The parent
   then reads a line on stdin, sends SIGQUIT to each worker, waits for
   them, and exits 0 when both exited 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
void *kept, *mine;
static void on_quit(int sig) { (void)sig; exit(0); }
int main(void) {
    kept = malloc(1111);
    memset(kept, 1, 1111);
    printf("parent %d\n", (int)getpid());
    fflush(stdout);
    pid_t w[2];
    for (int i = 0; i < 2; i++) {
        w[i] = fork();
        if (w[i] == 0) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_quit;
            sigaction(SIGQUIT, &sa, 0);
            mine = malloc(3000 + i);
            memset(mine, 2, 3000 + i);
            printf("worker %d %d\n", i, (int)getpid());
            fflush(stdout);
            for (;;) pause();
        }
    }
    char line[64];
    if (!fgets(line, sizeof line, stdin)) { /* stdin closed: stop anyway */ }
    int ok = 1;
    for (int i = 0; i < 2; i++) kill(w[i], SIGQUIT);
    for (int i = 0; i < 2; i++) {
        int st = 0;
        while (waitpid(w[i], &st, 0) < 0) {}
        ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    return ok ? 0 : 1;
}
