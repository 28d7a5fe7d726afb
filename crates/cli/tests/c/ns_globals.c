/* 110 blocks: 100 held by a global array (still reachable), 10 whose
   pointers are dropped (definitely lost). Run from a layout that exists
   only inside a mount namespace, its globals are roots only when the
   capture reads its writable segment from the process itself. */
#include <stdlib.h>
#include <string.h>

void *kept[100];

__attribute__((noinline)) static void make(void) {
    for (int i = 0; i < 100; i++) kept[i] = malloc(64 + i);
    for (int i = 0; i < 10; i++) { volatile void *p = malloc(48); p = 0; (void)p; }
}

__attribute__((noinline)) static void scrub(void) {
    volatile char buf[16384];
    memset((char *)buf, 0, sizeof buf);
}

int main(void) {
    make();
    scrub();
    return 0;
}
