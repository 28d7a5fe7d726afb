/* A linked list of 1000 nodes (each dominating the next and nothing else)
   and eight buffers of decreasing sizes, all kept from statics. */
#include <stdlib.h>

struct node { struct node *next; char pad[56]; };
struct node *list;
void *buffers[8];

int main(void) {
    for (int i = 0; i < 1000; i++) {
        struct node *n = calloc(1, sizeof *n);
        n->next = list;
        list = n;
    }
    for (int i = 0; i < 8; i++) buffers[i] = calloc(1, 8192 - 512 * i);
    return 0;
}
