/* One block through each interposed function, kept live to the exit dump. */
#include <stdlib.h>
#include <malloc.h>
void *keep[16];
int main(void) {
    keep[0] = malloc(1001);
    keep[1] = calloc(3, 1002);
    keep[2] = realloc(malloc(10), 1003);
    keep[3] = reallocarray(NULL, 2, 1004);
    if (posix_memalign(&keep[4], 64, 1005) != 0) return 2;
    keep[5] = aligned_alloc(128, 1024);
    keep[6] = memalign(32, 1007);
    keep[7] = valloc(1008);
    keep[8] = pvalloc(1009);
    keep[9] = realloc(malloc(4000), 1010);  /* shrink */
    free(malloc(5000));
    free(calloc(1, 5001));
    keep[10] = realloc(NULL, 1011);
    void *gone = malloc(1012);
    if (realloc(gone, 0) != NULL) return 3;   /* glibc: frees */
    if (calloc((size_t)-1, 16) != NULL) return 4; /* overflow fails */
    return malloc_usable_size(keep[0]) >= 1001 ? 0 : 1;
}
