/* Four threads each allocate 1000 blocks of a size of their own and free
   every other one: 500 of each size stay live. */
#include <pthread.h>
#include <stdlib.h>
#define N 1000
void *blocks[4][N];
static void *work(void *arg) {
    long t = (long)arg;
    for (int i = 0; i < N; i++) blocks[t][i] = malloc(100 + t);
    for (int i = 0; i < N; i += 2) { free(blocks[t][i]); blocks[t][i] = 0; }
    return 0;
}
int main(void) {
    pthread_t th[4];
    for (long t = 0; t < 4; t++) pthread_create(&th[t], 0, work, (void *)t);
    for (int t = 0; t < 4; t++) pthread_join(th[t], 0);
    return 0;
}
