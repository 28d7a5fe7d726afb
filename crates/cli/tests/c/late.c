/* A library the program loads with dlopen after start-up. */
#include <stdlib.h>
void *late_block;
__attribute__((noinline)) void *late_alloc(void) { late_block = malloc(4321); return late_block; }
