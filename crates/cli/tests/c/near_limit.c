/* Grows until malloc fails: 1 MiB blocks, written to (so they are
   resident), held in a list from one site, `grow`. Small blocks of another
   site, `steady`, stay constant: 1000, or a million with the argument
   "many" (a dump of them takes some 26 MB of its own). Prints how many MiB
   it held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct block { struct block *next; char data[(1 << 20) - 16]; };
struct small { struct small *next; long v[6]; };
struct block *blocks;
struct small *smalls;
__attribute__((noinline)) static void steady(int n) {
    for (int i = 0; i < n; i++) {
        struct small *s = malloc(sizeof *s);
        s->next = smalls;
        smalls = s;
    }
}
__attribute__((noinline)) static struct block *grow(void) {
    struct block *b = malloc(sizeof *b);
    if (b) {
        memset(b->data, 1, sizeof b->data);
        b->next = blocks;
        blocks = b;
    }
    return b;
}
int main(int argc, char **argv) {
    steady(argc > 1 && !strcmp(argv[1], "many") ? 1000000 : 1000);
    int n = 0;
    while (grow()) n++;
    printf("%d\n", n);
    return 0;
}
