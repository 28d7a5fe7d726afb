/* A thread builds a list of 10 nodes and leaks it, then ends; main joins
   it and exits. valgrind: 1 block definitely lost, 9 indirectly lost. */
#include <pthread.h>
#include <stdlib.h>
struct node { struct node *next; char pad[40]; };
static void *work(void *arg) {
    struct node *head = 0;
    for (int i = 0; i < 10; i++) { struct node *n = malloc(sizeof *n); n->next = head; head = n; }
    (void)arg;
    return 0;
}
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, work, 0);
    pthread_join(t, 0);
    return 0;
}
