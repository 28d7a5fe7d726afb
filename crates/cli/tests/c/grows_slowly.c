/* Grows a list held by `queue` by 500 nodes every 50 ms for about 1.5 s,
   then exits: `heapdump run --every` takes its dumps on the way. */
#include <stdlib.h>
#include <unistd.h>
struct job { struct job *next; char data[40]; };
struct job *queue;
/* A function of its own: inlined in main, the newest node stayed in a
   callee-saved register through the sleep, a root beside `queue`, and
   every dump saw the list held by main's stack (release builds of the
   runtime took their dumps there). */
__attribute__((noinline)) static void add(int n) {
    for (int i = 0; i < n; i++) {
        struct job *j = malloc(sizeof *j);
        j->next = queue;
        queue = j;
    }
}
int main(void) {
    for (int t = 0; t < 30; t++) {
        add(500);
        usleep(50000);
    }
    long n = 0;
    for (struct job *j = queue; j; j = j->next) n++;
    return n != 15000;
}
