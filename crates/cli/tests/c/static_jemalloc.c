/* A program linked with its own, static jemalloc (libjemalloc.a): its
   malloc is jemalloc's, inside the executable, so a preloaded library
   interposes nothing. It keeps 1000 blocks of 1 KiB and leaks one. */
#include <stdlib.h>
#include <string.h>
void *kept[1000];
int main(void) {
    for (int i = 0; i < 1000; i++) { kept[i] = malloc(1024); memset(kept[i], 1, 1024); }
    void *lost = malloc(4096);
    memset(lost, 2, 4096);
    lost = 0;
    return 0;
}
