/* A library stripped of its symbol table: only exported symbols remain.
   tiny_exported is 1 instruction long; the static functions after it
   allocate, and must not be credited to it. Each keeps its block (one
   that returned it would be an allocation wrapper, seen through). */
#include <stdlib.h>
void tiny_exported(void) {}
void *kept[2];
__attribute__((noinline)) static void hidden_a(void) { kept[0] = malloc(1000); }
__attribute__((noinline)) static void hidden_b(void) { kept[1] = malloc(2000); }
void entry(void) { hidden_a(); hidden_b(); }
