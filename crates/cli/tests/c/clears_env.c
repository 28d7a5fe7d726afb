/* A program that clears its environment (as some daemons and setuid
 * helpers do) and then keeps a block, so its exit dump has something to
 * say; with an argument, it first waits that many milliseconds. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *kept;

int main(int argc, char **argv) {
    kept = malloc(4321);
    memset(kept, 1, 4321);
    clearenv();
    if (argc > 1) {
        long ms = atol(argv[1]);
        struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
    return 0;
}
