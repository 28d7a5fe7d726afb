/* Grows until malloc fails: 1 MiB blocks, written to (so they are
   resident), held in a list from one site, `grow`. Small blocks of another
   site, `steady`, stay constant. Prints how many MiB it held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct block { struct block *next; char data[(1 << 20) - 16]; };
struct small { struct small *next; long v[6]; };
struct block *blocks;
struct small *smalls;
__attribute__((noinline)) static void steady(void) {
    for (int i = 0; i < 1000; i++) {
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
int main(void) {
    steady();
    int n = 0;
    while (grow()) n++;
    printf("%d\n", n);
    return 0;
}
