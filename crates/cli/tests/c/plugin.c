/* One plugin built twice for reloads.c: the code is the same but for the
 * size of the frame (-DFRAME), so both builds have their instructions at
 * the same offsets and different unwind rules there. */
#include <stdlib.h>
#include <string.h>
void *kept;
__attribute__((noinline)) void *plugin_alloc(int n) {
    volatile char buf[FRAME];
    memset((char *)buf, n, sizeof buf);
    kept = malloc(n + buf[n % 100]);
    return kept;
}
