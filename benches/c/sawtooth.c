/* The walk's worst case: a heap that grows in teeth, each rising 4% and
   falling back 2% (more than the 1/64 step), up to 2 M blocks of 64
   bytes: every tooth leaves a new peak. */
#include <stdlib.h>
#include <stdio.h>
static void *b[4 << 20];
int main(void) {
    size_t live = 0;
    for (size_t i = 0; i < 20000; i++) b[live++] = malloc(64);
    long teeth = 0;
    while (live < 2000000) {
        size_t n = live / 25 + 1;
        for (size_t i = 0; i < n; i++) b[live++] = malloc(64);
        for (size_t i = 0; i < n / 2; i++) free(b[--live]);
        teeth++;
    }
    printf("teeth=%ld live=%zu\n", teeth, live);
    return 0;
}
