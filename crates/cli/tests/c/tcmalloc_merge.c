/* Allocator churn that leaves stale page-map entries in tcmalloc: 200000
   small blocks allocated and freed (their spans go back to the page heap
   and merge), then large blocks carved from the merged spans and small
   ones of other classes (reusing the freed span descriptors). Live at
   the end: 3 large blocks and 100 small ones held from a global, one
   large block and one small one lost (lost in a function whose stack is
   then overwritten, with the list of freed blocks cleared). */
#include <stdlib.h>
#include <string.h>
void *keep[103];
static void *tmp[200000];
__attribute__((noinline)) static void lose(void) {
    void *volatile a = malloc(500 << 10);
    void *volatile b = malloc(1000);
    a = b = 0;
}
__attribute__((noinline)) static void scrub(void) {
    volatile char pad[16384];
    memset((char *)pad, 0, sizeof pad);
}
int main(void) {
    for (int i = 0; i < 200000; i++) tmp[i] = malloc(48 + (i % 4) * 16);
    for (int i = 0; i < 200000; i++) free(tmp[i]);
    memset(tmp, 0, sizeof tmp);
    for (int i = 0; i < 3; i++) keep[i] = malloc((300 + i * 100) << 10);
    for (int i = 3; i < 103; i++) keep[i] = malloc(200 + i);
    lose();
    scrub();
    return 0;
}
