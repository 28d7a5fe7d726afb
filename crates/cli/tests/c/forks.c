/* The parent keeps a 111-byte block and forks; the child adds 222 bytes
   and exits; then the parent adds 333 bytes. Each writes its own dump. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
void *a, *b, *c;
int main(void) {
    a = malloc(111);
    pid_t pid = fork();
    if (pid == 0) { b = malloc(222); exit(0); }
    int st; waitpid(pid, &st, 0);
    c = malloc(333);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
