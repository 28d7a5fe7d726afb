/* A library stripped of its symbol table: only exported symbols remain.
   tiny_exported is 1 instruction long; the static functions after it
   allocate, and must not be credited to it. */
#include <stdlib.h>
void tiny_exported(void) {}
__attribute__((noinline)) static void *hidden_a(void) { return malloc(1000); }
__attribute__((noinline)) static void *hidden_b(void) { return malloc(2000); }
void *kept[2];
void entry(void) { kept[0] = hidden_a(); kept[1] = hidden_b(); }
