/* A data file mapped whole beside the heap (read-only, at offset 0, as a
   database or a model maps its data), and 1000 blocks a global array
   holds. A capture from outside reads the heap, never the file. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void *kept[1000];
const char *data;

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return 3;
    data = mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) return 4;
    for (int i = 0; i < 1000; i++) kept[i] = malloc(32 + i % 64);
    return 0;
}
