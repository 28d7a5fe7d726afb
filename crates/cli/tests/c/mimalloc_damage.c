/* Damages its own mimalloc heap (run with LD_PRELOAD=libmimalloc.so.2),
   then stops (stop_at_end.c) for `heapdump attach` to refuse it:
   "loop": a block freed onto its page's local free list points to
   itself; "cookie": the segment holding the program's blocks no longer
   carries its cookie (mimalloc's segments are 32 MiB-aligned, the cookie
   the 28th word of the header); "none": no damage, and one huge block (40
   MiB: a huge segment of its own) beside the small ones. A damaged
   program is killed, never resumed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *kept[64];
void *huge;

int main(int argc, char **argv) {
    for (int i = 0; i < 64; i++) kept[i] = malloc(48);
    void *freed = kept[10];
    free(freed);
    kept[10] = 0;
    huge = malloc(40 << 20);
    if (argc > 1 && strcmp(argv[1], "loop") == 0) {
        *(void **)freed = freed;
    } else if (argc > 1 && strcmp(argv[1], "cookie") == 0) {
        uint64_t *segment = (uint64_t *)((uintptr_t)kept[0] & ~(uintptr_t)((32 << 20) - 1));
        segment[27] ^= 0x10;
    }
    return 0;
}
