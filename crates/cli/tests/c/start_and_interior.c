/* Two ways to one block, each time an interior pointer before a start
   pointer: the block `held` is pointed into at offset 0 of the static
   `holder` block and at its start at offset 16; the block `rooted` is
   pointed into by the static `roots` at offset 0 and at its start at
   offset 8. valgrind calls a block reached by a start pointer reachable:
   the route `path` gives must be through the start pointers. */
#include <stdlib.h>

struct holder {
    char *inside;
    long pad;
    char *start;
};

struct {
    char *inside;
    char *start;
} roots;

struct holder *holder;

/* In a function of its own, so that no word of main's frame keeps a
   block. */
__attribute__((noinline)) static void setup(void) {
    char *held = calloc(1, 64);
    holder = calloc(1, sizeof *holder);
    holder->inside = held + 8;
    holder->start = held;
    char *rooted = calloc(1, 96);
    roots.inside = rooted + 24;
    roots.start = rooted;
}

/* Overwrites the stack setup's frame used. */
__attribute__((noinline)) static void scrub(void) {
    volatile char room[4096];
    for (int i = 0; i < 4096; i++) room[i] = 0;
}

int main(void) {
    setup();
    scrub();
    return 0;
}
