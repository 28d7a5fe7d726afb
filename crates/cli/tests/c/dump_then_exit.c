/* Builds a list of N 48-byte nodes held from a global, raises the dump
   signal and returns at once: the dump (answered by the runtime's helper
   thread, or its forked writer) is still being written when main returns.
   `heapdump run` used to print "no dump was written" and leave the file to
   be finished after it had exited. */
#include <signal.h>
#include <stdlib.h>
struct node { struct node *next; long pad[5]; };
struct node *head;
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 300000;
    for (long i = 0; i < n; i++) {
        struct node *x = malloc(sizeof *x);
        x->next = head;
        head = x;
    }
    raise(SIGUSR2);
    return 0;
}
