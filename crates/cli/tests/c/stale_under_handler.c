/* A block the program has dropped, whose address it leaves in the stack
   below its own frames (a deeper call's dead locals), then asks for a dump
   with SIGUSR2, many times over. The runtime's handler for the signal and
   the kernel's signal frame are laid over that dead stack; a stop that
   catches the thread inside the handler must still dump the program as the
   signal found it: the block lost every time, never "still reachable"
   through the handler's frames. Argument: how many dumps (default 40). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Where the block escapes to, so that the compiler keeps it. */
void *volatile sink;

#define WORDS 4096

/* Fills the stack below the caller with the block's address, except the
   top kilobyte, which `raise`'s own frames reuse (those are the program's
   live frames when the signal arrives: a scan is right to see them). */
__attribute__((noinline)) static void leave_in_dead_stack(void *p) {
    volatile void *words[WORDS];
    for (int i = 0; i < WORDS - 128; i++) words[i] = p;
    for (int i = WORDS - 128; i < WORDS; i++) words[i] = 0;
}

__attribute__((noinline)) static void dump_once(void) {
    char *dropped = malloc(4321);
    memset(dropped, 'x', 4321);
    sink = dropped;
    leave_in_dead_stack(dropped);
    sink = NULL;
    dropped = NULL;
    raise(SIGUSR2);
    /* The runtime's helper writes the dump meanwhile; wait for it (the
       stop's signal cuts a sleep short). */
    struct timespec ts = {0, 30 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    void *kept = malloc(100);
    for (int i = 0; i < n; i++) dump_once();
    return kept == NULL;
}
