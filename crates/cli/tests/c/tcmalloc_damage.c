/* Damages its own tcmalloc heap (run with libtcmalloc_minimal preloaded)
   as argv[1] says, then stops (STOP_AT_END) for `heapdump attach`: two
   objects of 64 bytes are freed into the thread's cache (a list linked
   through their first words, the last freed first); "loop" links the
   older one back to the newer, "middle" points it into the middle of a
   live object. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
void *keep[16];
int main(int argc, char **argv) {
    for (int i = 0; i < 16; i++) keep[i] = malloc(64);
    void *a = malloc(64), *b = malloc(64);
    free(a);
    free(b);
    if (argc > 1 && !strcmp(argv[1], "loop")) *(void **)a = b;
    if (argc > 1 && !strcmp(argv[1], "middle")) *(void **)a = (char *)keep[5] + 8;
    return 0;
}
