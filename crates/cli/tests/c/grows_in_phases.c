/* Three phases, each growing its own site by 300 blocks of 4 KiB (1.2
   MiB): under `run --threshold 1M` the live heap crosses 1, 2 and 3 MiB
   once each, in phase_a, phase_b and phase_c, so the three threshold dumps
   (then the exit dump) are a series in which every step grows a new site. */
#include <stdlib.h>
static void *kept[900];
static int n;
__attribute__((noinline)) static void phase_a(void) { for (int i = 0; i < 300; i++) kept[n++] = malloc(4096); }
__attribute__((noinline)) static void phase_b(void) { for (int i = 0; i < 300; i++) kept[n++] = malloc(4096); }
__attribute__((noinline)) static void phase_c(void) { for (int i = 0; i < 300; i++) kept[n++] = malloc(4096); }
int main(void) {
    phase_a();
    phase_b();
    phase_c();
    return 0;
}
