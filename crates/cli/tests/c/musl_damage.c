/* Damages its own mallocng heap as argv[1] says, then stops (STOP_AT_END)
   for `heapdump attach`: "area" overwrites the first meta area's secret,
   "group" the back link of a group to its meta, "slot" the index in a
   live slot's header. musl's layout (1.2.x): a block's group header lies
   UNIT * offset + UNIT before it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
void *keep[16];
int main(int argc, char **argv) {
    for (int i = 0; i < 16; i++) keep[i] = malloc(40);
    unsigned char *p = keep[3];
    uint16_t off = *(uint16_t *)(p - 2);
    unsigned char *group = p - 16 * (uintptr_t)off - 16;
    uintptr_t meta = *(uintptr_t *)group;
    if (argc > 1 && !strcmp(argv[1], "area")) *(uint64_t *)(meta & -4096) ^= 0x5a5a;
    if (argc > 1 && !strcmp(argv[1], "group")) *(uintptr_t *)group = meta + 40;
    if (argc > 1 && !strcmp(argv[1], "slot")) p[-3] ^= 9;
    return 0;
}
