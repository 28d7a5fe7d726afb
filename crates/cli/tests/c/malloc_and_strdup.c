/* Blocks allocated through malloc and through glibc's strdup by the
   program's own functions: every export's stack starts at those functions
   (make_buffers, remember_names), never at malloc or strdup's insides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
char **names;
__attribute__((noinline)) static void make_buffers(void) {
    for (int i = 0; i < 64; i++) {
        char *b = malloc(16384);
        memset(b, i, 16384);
    }
}
__attribute__((noinline)) static void remember_names(void) {
    names = malloc(2000 * sizeof *names);
    for (int i = 0; i < 2000; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "a name of some length, number %d", i);
        names[i] = strdup(buf);
    }
}
int main(void) {
    make_buffers();
    remember_names();
    return 0;
}
