/* A program keeps its own pool in an anonymous mapping, and the pool's
   pointers are the only ones to 100 small blocks. glibc maps a large block
   right below it, and the kernel merges the two mappings into one.
   valgrind: every block still reachable. Exits 2 if the mappings did not
   end up adjacent (nothing to test then). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#define POOL (1 << 20)
static char *big;
static void **pool;
int main(void) {
    void **p = mmap(0, POOL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 3;
    big = malloc(1 << 20); /* glibc maps it itself: below the pool */
    memset(big, 1, 1 << 20);
    uintptr_t chunk_end = (uintptr_t)big - 16 + (((size_t *)big)[-1] & ~(size_t)7);
    for (int i = 0; i < 100; i++) p[i * 7] = malloc(32 + i);
    /* Keep only an address inside the pool, not the mapping's start. */
    pool = p + 1;
    return chunk_end == (uintptr_t)p ? 0 : 2;
}
