/* Four threads, alive at once, each allocate 1000 blocks of a size of
   their own (so each gets an arena of its own), free every other one, and
   wait for each other before ending: 500 of each size stay live, held
   from a global; then a list of 50 nodes is lost from each thread. */
#include <pthread.h>
#include <stdlib.h>
#define N 1000
void *blocks[4][N];
static pthread_barrier_t all_allocated;
struct node { struct node *next; long v; };
static void *work(void *arg) {
    long t = (long)arg;
    for (int i = 0; i < N; i++) blocks[t][i] = malloc(100 + 40 * t);
    for (int i = 0; i < N; i += 2) { free(blocks[t][i]); blocks[t][i] = 0; }
    struct node *head = 0;
    for (int i = 0; i < 50; i++) { struct node *n = malloc(sizeof *n); n->next = head; head = n; }
    pthread_barrier_wait(&all_allocated);
    return 0;
}
int main(void) {
    pthread_t th[4];
    pthread_barrier_init(&all_allocated, 0, 4);
    for (long t = 0; t < 4; t++) pthread_create(&th[t], 0, work, (void *)t);
    for (int t = 0; t < 4; t++) pthread_join(th[t], 0);
    return 0;
}
