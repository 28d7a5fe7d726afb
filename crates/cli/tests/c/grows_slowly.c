/* Grows a list held by `queue` by 500 nodes every 50 ms for about 1.5 s,
   then exits: `heapdump run --every` takes its dumps on the way. */
#include <stdlib.h>
#include <unistd.h>
struct job { struct job *next; char data[40]; };
struct job *queue;
int main(void) {
    for (int t = 0; t < 30; t++) {
        for (int i = 0; i < 500; i++) {
            struct job *j = malloc(sizeof *j);
            j->next = queue;
            queue = j;
        }
        usleep(50000);
    }
    long n = 0;
    for (struct job *j = queue; j; j = j->next) n++;
    return n != 15000;
}
