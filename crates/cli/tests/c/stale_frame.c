/* Builds a tree in a recursive function whose frames keep pointers to its
   nodes, drops the tree (leaked), and exits from main without calling
   anything deep enough to overwrite those frames: stale words that a
   conservative scan may or may not find, which must at least be the same
   in every run (one program gave 616 B in 11 blocks indirectly lost in
   three of six runs and 112 B in 2 blocks in the other three). */
#include <stdlib.h>
#include <string.h>
struct node { struct node *l, *r; char pad[40]; };
__attribute__((noinline)) static struct node *build(int depth) {
    struct node *n = malloc(sizeof *n);
    memset(n->pad, depth, sizeof n->pad);
    n->l = depth > 0 ? build(depth - 1) : NULL;
    n->r = depth > 0 ? build(depth - 1) : NULL;
    return n;
}
__attribute__((noinline)) static void work(void) {
    volatile struct node *t = build(6);
    t = NULL;
    (void)t;
}
int main(void) {
    void *kept = malloc(100);
    work();
    return kept == NULL;
}
