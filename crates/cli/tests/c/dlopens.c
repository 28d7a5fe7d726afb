/* Loads liblate.so (path in argv[1]) after start-up and allocates from it. */
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    void *(*f)(void) = (void *(*)(void))dlsym(h, "late_alloc");
    return f && f() ? 0 : 3;
}
