/* The shape of a pre-fork server's worker: the parent makes 1,000 blocks
   and forks; the child makes 19,000 more (its heap grows past the parent's
   [heap] mapping, which the kernel then splits in two), writes the address
   of one of the parent's blocks and its pid to argv[1], and stops itself
   (SIGSTOP) for attach or gcore; SIGCONT lets it exit. The parent waits
   for it.

   With BOUNDARY=chunk the child first fills the parent's top chunk
   exactly to the end of the parent's mapping, so that a chunk starts at
   the boundary; else the boundary falls inside a chunk.

   Every block is held from `keep` (one mapped block): 20,001 live blocks,
   and nothing else (no stdio). With "nostop" as argv[2] the child does
   not stop (under valgrind, which checks it as it exits). */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PARENT 1000
#define CHILD 19000

void **keep;

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    keep = malloc((PARENT + CHILD) * sizeof *keep); /* mapped: above the threshold */
    for (int i = 0; i < PARENT; i++) keep[i] = malloc(24 + 16 * (i % 40));
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid > 0) {
        int st;
        waitpid(pid, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    int n = PARENT;
    const char *b = getenv("BOUNDARY");
    if (b && strcmp(b, "chunk") == 0) {
        /* The top chunk starts after the last block; the parent's mapping
           ends at the program break. Fill the gap with blocks whose chunks
           end exactly at the break (small enough not to be mapped). */
        char *end = sbrk(0);
        char *last = keep[PARENT - 1];
        size_t gap = (size_t)(end - (last - 16 + ((((size_t *)last)[-1]) & ~(size_t)7)));
        while (gap > 0) {
            size_t c = gap > 65536 + 32 ? 65536 : gap;
            keep[n++] = malloc(c - 8); /* chunk size c: request c - 8 */
            gap -= c;
        }
    }
    while (n < PARENT + CHILD) {
        keep[n] = malloc(24 + 16 * (n % 40));
        n++;
    }
    char line[64];
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int len = snprintf(line, sizeof line, "%p\n%d\n", keep[PARENT / 2], (int)getpid());
    if (fd < 0 || write(fd, line, len) != len) return 1;
    close(fd);
    if (argc > 2 && strcmp(argv[2], "nostop") == 0) return 0;
    len = snprintf(line, sizeof line, "stopped %d\n", (int)getpid());
    write(2, line, len);
    raise(SIGSTOP);
    return 0;
}
