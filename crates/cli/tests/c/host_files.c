/* A program that is hard on its guest: with argv[1] = "fsize" it limits
   its files to 4 KiB or argv[2] bytes (RLIMIT_FSIZE) and keeps 100 KB of heap, so the exit
   dump cannot fit; with "stderr" it closes descriptor 2 and opens a data
   file (argv[2]) as number 2, writing its own line there. Either way it
   exits 0 untraced; traced, the first used to die of SIGXFSZ (status 153)
   and the second found "heapdump: wrote ..." inside its data file. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
void *keep[100];
int main(int argc, char **argv) {
    for (int i = 0; i < 100; i++) keep[i] = calloc(1, 1000);
    if (argc > 1 && strcmp(argv[1], "fsize") == 0) {
        rlim_t n = argc > 2 ? (rlim_t)atol(argv[2]) : 4096;
        struct rlimit r = { n, n };
        if (setrlimit(RLIMIT_FSIZE, &r) != 0) return 2;
    }
    if (argc > 2 && strcmp(argv[1], "stderr") == 0) {
        close(2);
        int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd != 2) return 3;
        write(2, "data\n", 5);
    }
    return 0;
}
