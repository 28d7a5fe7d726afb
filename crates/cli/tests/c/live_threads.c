/* Two threads still running when the program stops at its end, each
   holding a block on its stack: three threads of the program's own. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static void *work(void *arg) {
    volatile void *mine = malloc(64 + (long)arg);
    for (;;) pause();
    return (void *)mine;
}

int main(void) {
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, work, (void *)i);
    usleep(100000);
    return 0;
}
