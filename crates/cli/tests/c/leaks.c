/* Every kind of leak memcheck knows, with no stale copies left on the
   stack or in registers: allocations happen in functions whose frames are
   scrubbed before exit. */
#include <stdlib.h>
#include <string.h>

struct node { struct node *next; char pad[40]; };
void *reachable;          /* start pointer: still reachable */
char *interior;           /* interior pointer only: possibly lost */
struct node *kept_list;   /* a reachable list of 3 */

__attribute__((noinline)) static void make(void) {
    reachable = malloc(100);
    interior = (char *)malloc(200) + 16;
    for (int i = 0; i < 3; i++) { struct node *n = calloc(1, sizeof *n); n->next = kept_list; kept_list = n; }
    /* definitely lost: a single block */
    malloc(300);
    /* definitely lost head with two indirectly lost blocks */
    struct node *h = calloc(1, sizeof *h); h->next = calloc(1, sizeof *h); h->next->next = calloc(1, sizeof *h);
    h = 0;
    /* a lost cycle of two: one definitely, one indirectly lost */
    struct node *x = calloc(1, sizeof *x), *y = calloc(1, sizeof *y);
    x->next = y; y->next = x; x = y = 0;
    /* freed: not reported at all */
    free(malloc(5000));
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
