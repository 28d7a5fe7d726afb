/* Fifteen sites each leak one block: more lost groups than `leaks`
   shows by default. */
#include <stdlib.h>
#define LEAK(n) __attribute__((noinline)) void leak##n(void) { void *volatile p = malloc(100 + n); p = 0; (void)p; }
LEAK(1) LEAK(2) LEAK(3) LEAK(4) LEAK(5) LEAK(6) LEAK(7) LEAK(8) LEAK(9) LEAK(10) LEAK(11) LEAK(12) LEAK(13) LEAK(14) LEAK(15)
int main(void) {
    leak1(); leak2(); leak3(); leak4(); leak5(); leak6(); leak7(); leak8();
    leak9(); leak10(); leak11(); leak12(); leak13(); leak14(); leak15();
    return 0;
}
