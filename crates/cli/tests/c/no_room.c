/* Holds 100 small blocks from one site, `hold`, then takes every byte of
   address space its limit leaves (inaccessible mappings, halving the size
   until a page no longer fits) and asks malloc for 1 MiB: refused, with
   nothing left for anyone. Prints whether it was granted. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
void *held[100];
__attribute__((noinline)) static void hold(void) {
    for (int i = 0; i < 100; i++) held[i] = malloc(64);
}
int main(void) {
    hold();
    for (size_t size = (size_t)1 << 32; size >= 4096; size /= 2)
        while (mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) != MAP_FAILED) {
        }
    void *p = malloc(1 << 20);
    printf("%s\n", p ? "granted" : "refused");
    return 0;
}
