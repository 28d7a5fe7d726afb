/* What --fork --collapse leaves on 4 KiB pages: a 64 MiB array (malloc
   maps it; the kernel may merge that mapping with one of the runtime's
   beside it) and 2 000 000 small blocks with sites (the tracker's slots
   and site words). Raises the dump signal, waits for the dump (argv[1])
   to be written, then prints, from /proc/self/smaps:
     array HUGE_KIB SPAN_KIB   the array's mapping: on huge pages, and the
                               2 MiB ranges wholly inside the array
     small KIB                 anonymous writable memory on 4 KiB pages
     shadow KIB                of which the tracker's shadow (the mappings
                               left out of core dumps: VmFlags dd) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    size_t n = 64u << 20;
    char *array = malloc(n);
    memset(array, 7, n);
    static void *small[2000000];
    for (int i = 0; i < 2000000; i++) {
        small[i] = malloc(40);
        memset(small[i], i, 40);
    }
    raise(SIGUSR2);
    for (int i = 0; i < 6000; i++) {
        struct stat st;
        if (stat(argv[1], &st) == 0 && st.st_size > 0) {
            usleep(50000);
            off_t last = st.st_size;
            if (stat(argv[1], &st) == 0 && st.st_size == last) break;
        }
        usleep(10000);
    }
    unsigned long a0 = (unsigned long)array, a1 = a0 + n;
    unsigned long span = ((a1 & ~0x1fffffUL) - ((a0 + 0x1fffff) & ~0x1fffffUL)) / 1024;
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    unsigned long s = 0, e = 0, rss = 0, huge = 0, small_kib = 0, array_huge = 0, shadow_kib = 0;
    int anon_rw = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long x, y;
        char perms[8];
        unsigned long long off;
        char dev[16];
        unsigned long inode;
        char path[256] = "";
        if (sscanf(line, "%lx-%lx %7s %llx %15s %lu %255s", &x, &y, perms, &off, dev, &inode, path) >= 6 && strchr(line, '-') < strchr(line, ' ')) {
            s = x, e = y;
            anon_rw = perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p' && inode == 0 && (path[0] == 0 || strcmp(path, "[heap]") == 0);
            continue;
        }
        if (sscanf(line, "Rss: %lu kB", &rss) == 1) continue;
        if (sscanf(line, "AnonHugePages: %lu kB", &huge) == 1) {
            if (anon_rw) small_kib += rss - huge;
            if (s <= a0 && a1 <= e) array_huge = huge;
        }
        if (strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " dd") && anon_rw) shadow_kib += rss - huge;
    }
    printf("array %lu %lu\nsmall %lu\nshadow %lu\n", array_huge, span, small_kib, shadow_kib);
    free(array);
    return 0;
}
