/* Blocks glibc maps by themselves, written only at their start: the rest
   of their pages were never touched (not in memory). One of 1 MiB and one
   of 4 MiB, held from globals. */
#include <stdlib.h>
char *one, *four;
int main(void) {
    one = malloc(1 << 20);
    four = malloc(4 << 20);
    one[0] = four[0] = 1;
    return 0;
}
