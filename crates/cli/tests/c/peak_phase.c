/* A service in three phases: a table built once and kept, a phase whose
 * 48 MiB buffer lives briefly (freed before the next phase), and a churn
 * loop: exactly 100000 allocations of 64 bytes, each freed before the
 * next allocation of its thread (temporaries), then 1000 kept in a list.
 * At exit nothing of the buffer is live. */
#include <stdlib.h>
#include <string.h>

struct node { struct node *next; char pad[56]; };
struct node *volatile kept;
char **volatile table;

__attribute__((noinline)) static void build_table(void) {
    table = malloc(4096 * sizeof *table);
    for (int i = 0; i < 4096; i++) table[i] = malloc(256);
}

__attribute__((noinline)) static char *big_buffer(void) {
    char *b = malloc(48u << 20);
    memset(b, 1, 48u << 20);
    return b;
}

__attribute__((noinline)) static void *churn_one(void) {
    return malloc(64);
}

__attribute__((noinline)) static void keep_one(void) {
    struct node *n = malloc(sizeof *n);
    n->next = kept;
    kept = n;
}

int main(void) {
    build_table();
    char *b = big_buffer();
    volatile char sink = b[12345];
    (void)sink;
    free(b);
    for (int i = 0; i < 100000; i++) {
        char *volatile p = churn_one();
        p[0] = 1;
        free(p);
    }
    for (int i = 0; i < 1000; i++) keep_one();
    return 0;
}
