/* A program that crashes holding a list of 100 nodes only from the
   crashing frame (a local). Usage: crash segv|abort|doublefree|overflow
     segv:       writes to address 0x10;
     abort:      calls abort();
     doublefree: frees a block twice: glibc aborts inside free, that is
                 inside the tracker's free;
     overflow: recurses until the stack overflows (the handler must run
               on an alternate stack). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct node { struct node *next; long v[5]; };
__attribute__((noinline)) static long deep(long n) {
    volatile char pad[256];
    pad[0] = (char)n;
    return deep(n + 1) + pad[0];
}
int main(int argc, char **argv) {
    struct node *volatile list = 0;
    for (int i = 0; i < 100; i++) {
        struct node *n = malloc(sizeof *n);
        n->next = list;
        list = n;
    }
    if (argc > 1 && !strcmp(argv[1], "abort")) abort();
    if (argc > 1 && !strcmp(argv[1], "doublefree")) {
        char *volatile p = malloc(64);
        free(p);
        free(p);
    }
    if (argc > 1 && !strcmp(argv[1], "overflow")) return (int)deep(0);
    *(volatile int *)(uintptr_t)0x10 = 1;
    return list == 0;
}
