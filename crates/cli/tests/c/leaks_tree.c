/* A larger lost structure next to a reachable one: a binary tree of 63
   nodes whose root pointer is dropped, and another kept in a global. */
#include <stdlib.h>
#include <string.h>
struct t { struct t *l, *r; long v; };
struct t *kept;
__attribute__((noinline)) static struct t *tree(int depth) {
    if (depth == 0) return 0;
    struct t *n = malloc(sizeof *n);
    n->l = tree(depth - 1); n->r = tree(depth - 1); n->v = depth;
    return n;
}
__attribute__((noinline)) static void make(void) {
    kept = tree(5);
    tree(6);
    char *s = strdup("a string reachable from nowhere");
    s = 0;
}
__attribute__((noinline)) static void scrub(void) {
    volatile char buf[16384];
    memset((char *)buf, 0, sizeof buf);
}
int main(void) { make(); scrub(); return 0; }
