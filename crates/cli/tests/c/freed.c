/* Frees blocks into the per-thread cache and the fastbins, and nothing
   after that could consolidate them: 40 blocks of 40 bytes, 20 of 24 and
   10 of 100 are freed (7 of each size go to the thread's cache, the rest
   to the fastbins), 30 blocks of 40 and 5 of 200 stay, and 1 of 5000 is
   freed into the unsorted bin. The freed addresses are written to the
   file named by the first argument. */
#include <stdio.h>
#include <stdlib.h>
void *keep[35];
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "w");
    setvbuf(f, NULL, _IONBF, 0);
    void *gone[71];
    int n = 0;
    for (int i = 0; i < 70; i++) {
        void *p = malloc(40);
        if (i % 7 < 3) keep[i / 7 * 3 + i % 7] = p; else gone[n++] = p;
    }
    for (int i = 0; i < 20; i++) gone[n++] = malloc(24);
    for (int i = 0; i < 10; i++) gone[n++] = malloc(100);
    for (int i = 0; i < 5; i++) keep[30 + i] = malloc(200);
    void *big = malloc(5000);
    void *guard = malloc(24);
    for (int i = 0; i < n; i++) { fprintf(f, "%p\n", gone[i]); free(gone[i]); }
    fprintf(f, "%p\n", big);
    free(big);
    (void)guard;
    fclose(f);
    return 0;
}
