/* Grows its heap in 16 KiB blocks to 3.5 MiB, shrinks it to 0.5 MiB, grows
   it again to 2.5 MiB (crossing 1 and 2 MiB a second time, never 3.5
   MiB), then exits holding it. */
#include <stdlib.h>
#define BLOCK (16 << 10)
#define MAX 224 /* 3.5 MiB */
static void *kept[MAX];
static int n;
static void grow_to(int blocks) {
    while (n < blocks) kept[n++] = malloc(BLOCK);
}
static void shrink_to(int blocks) {
    while (n > blocks) free(kept[--n]);
}
int main(void) {
    grow_to(MAX);
    shrink_to(32);
    grow_to(160);
    return 0;
}
