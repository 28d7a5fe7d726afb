/* Loads plugin A (argv[1]), allocates from it, unloads it, then loads
 * plugin B (argv[2]), often at A's address, and allocates from it: sites
 * from B must not be unwound with rules cached for A. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
static int call(const char *path, int n, int unload) {
    void *h = dlopen(path, RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 0; }
    void *(*f)(int) = (void *(*)(int))dlsym(h, "plugin_alloc");
    void *p = f ? f(n) : 0;
    if (unload) {
        /* A's block goes too: only B's stays for the dump to show. */
        free(p);
        dlclose(h);
    }
    return p != 0;
}
__attribute__((noinline)) int from_main(const char *a, const char *b) {
    return call(a, 100, 1) && call(b, 5000, 0);
}
int main(int argc, char **argv) {
    return argc == 3 && from_main(argv[1], argv[2]) ? 0 : 3;
}
