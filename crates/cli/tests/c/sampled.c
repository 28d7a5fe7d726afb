/* 100,000 blocks of 24 bytes and 20 of 64 KiB, all kept: under sampled
   sites, totals by site must still add up to the live bytes. */
#include <stdlib.h>
void *small[100000], *large[20];
__attribute__((noinline)) void make_small(void) { for (int i = 0; i < 100000; i++) small[i] = malloc(24); }
__attribute__((noinline)) void make_large(void) { for (int i = 0; i < 20; i++) large[i] = malloc(65536); }
int main(void) { make_small(); make_large(); return 0; }
