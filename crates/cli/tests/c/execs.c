/* Allocates 444 bytes, then executes itself with an argument; the new
   image allocates 777 bytes and exits. Both images are traced. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
void *p;
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) { p = malloc(777); return 0; }
    p = malloc(444);
    pid_t pid = fork();
    if (pid == 0) { execl("/proc/self/exe", argv[0], "child", (char *)0); _exit(9); }
    int st = 0; while (waitpid(pid, &st, 0) < 0) {}
    return 0;
}
