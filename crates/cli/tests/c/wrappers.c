/* Allocation through the program's own wrappers: xmalloc (on heapdump's
   list of allocation wrappers) and a pool function (seen through only
   with --skip: it marks each block, so it is a user of what it returns,
   not a wrapper). Sizes are exact: parse 1000 x 64, render 1000 x 192,
   load 500 x 32, all kept. */
#include <stdlib.h>

void *kept[3000];
int nkept;

__attribute__((noinline)) void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) abort();
    return p;
}

__attribute__((noinline)) void *my_pool_get(size_t n) {
    char *p = xmalloc(n);
    p[0] = 1;
    return p;
}

__attribute__((noinline)) static void parse(void) { for (int i = 0; i < 1000; i++) kept[nkept++] = my_pool_get(64); }
__attribute__((noinline)) static void render(void) { for (int i = 0; i < 1000; i++) kept[nkept++] = my_pool_get(192); }
__attribute__((noinline)) static void load(void) { for (int i = 0; i < 500; i++) kept[nkept++] = xmalloc(32); }

int main(void) {
    parse();
    render();
    load();
    return 0;
}
