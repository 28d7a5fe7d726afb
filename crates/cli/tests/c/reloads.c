/* Loads plugin A (argv[1]), allocates from it, unloads it, then loads
 * plugin B (argv[2]), at A's address as the kernel reuses the hole, and
 * allocates from it: sites from B must not be unwound with rules cached
 * for A. */
#include <dlfcn.h>
#include <stdio.h>
static int call(const char *path, int n, int unload) {
    void *h = dlopen(path, RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 0; }
    void *(*f)(int) = (void *(*)(int))dlsym(h, "plugin_alloc");
    int ok = f && f(n);
    if (unload) dlclose(h);
    return ok;
}
__attribute__((noinline)) int from_main(const char *a, const char *b) {
    return call(a, 100, 1) && call(b, 5000, 0);
}
int main(int argc, char **argv) {
    return argc == 3 && from_main(argv[1], argv[2]) ? 0 : 3;
}
