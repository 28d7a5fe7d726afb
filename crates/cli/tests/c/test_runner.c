/* A test runner that forks a process per test, as ctest or a cargo test
   binary run with one process per test do: `test_runner STATUS TEST...`
   runs each named test in its own child (which exits 0), waits for it,
   then exits with STATUS. Tests: clean (frees what it allocates),
   leak_list (loses a list of three nodes: one definitely, two indirectly
   lost), leak_buffer (loses one 4000-byte buffer), possible (keeps only
   an interior pointer to a 512-byte block: possibly lost). */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct node { struct node *next; char pad[56]; };
char *interior;

__attribute__((noinline)) static void clean(void) {
    char *p = malloc(1000);
    memset(p, 1, 1000);
    free(p);
}

__attribute__((noinline)) static void leak_list(void) {
    struct node *h = 0;
    for (int i = 0; i < 3; i++) { struct node *n = calloc(1, sizeof *n); n->next = h; h = n; }
    h = 0;
}

__attribute__((noinline)) static void leak_buffer(void) {
    char *volatile p = malloc(4000);
    memset(p, 2, 4000);
    p = 0;
}

__attribute__((noinline)) static void possible(void) {
    interior = (char *)malloc(512) + 64;
}

/* No stale copy of a lost pointer left on the stack. */
__attribute__((noinline)) static void scrub(void) {
    volatile char buf[16384];
    memset((char *)buf, 0, sizeof buf);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    for (int i = 2; i < argc; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (!strcmp(argv[i], "clean")) clean();
            else if (!strcmp(argv[i], "leak_list")) leak_list();
            else if (!strcmp(argv[i], "leak_buffer")) leak_buffer();
            else if (!strcmp(argv[i], "possible")) possible();
            else exit(2);
            scrub();
            exit(0);
        }
        int st;
        waitpid(pid, &st, 0);
    }
    return atoi(argv[1]);
}
