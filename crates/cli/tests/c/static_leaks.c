/* Every kind of leak memcheck knows (as leaks.c), for a program linked
   statically (gcc -static, -static-pie), where glibc's malloc lives in the
   executable itself. It asks glibc its version: that links glibc's banner
   ("GNU C Library ... release version 2.xx") into it, which a static
   program holds only then. Roots a static program keeps where a dynamic
   one does not, each holding one block only:
   - a global: the executable's writable segment;
   - a thread-local variable of the main thread: its static TLS, which a
     static glibc's start-up takes from the brk area, below malloc's heap;
   - a thread-local variable of a thread still running, whose blocks are in
     an arena of its own (glibc's non-main heaps).
   Allocations happen in functions whose frames are scrubbed before the
   end, so no stale copies are left on the stacks or in registers. */
#include <gnu/libc-version.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct node { struct node *next; char pad[40]; };
void *reachable;          /* start pointer: still reachable */
char *interior;           /* interior pointer only: possibly lost */
struct node *kept_list;   /* a reachable list of 3 */
__thread void *main_tls;  /* the main thread's: still reachable */
__thread struct node *thread_tls; /* the thread's: a reachable list of 2 */
static int ready[2], never[2];

__attribute__((noinline)) static void make(void) {
    reachable = malloc(100);
    interior = (char *)malloc(200) + 16;
    for (int i = 0; i < 3; i++) { struct node *n = calloc(1, sizeof *n); n->next = kept_list; kept_list = n; }
    main_tls = malloc(400);
    /* definitely lost: a single block */
    malloc(300);
    /* definitely lost head with two indirectly lost blocks */
    struct node *h = calloc(1, sizeof *h); h->next = calloc(1, sizeof *h); h->next->next = calloc(1, sizeof *h);
    h = 0;
    /* a lost cycle of two: one definitely, one indirectly lost */
    struct node *x = calloc(1, sizeof *x), *y = calloc(1, sizeof *y);
    x->next = y; y->next = x; x = y = 0;
    /* freed: not reported at all */
    free(malloc(5000));
}

__attribute__((noinline)) static void scrub(void) {
    volatile char buf[16384];
    memset((char *)buf, 0, sizeof buf);
}

__attribute__((noinline)) static void thread_make(void) {
    thread_tls = calloc(1, sizeof *thread_tls);
    thread_tls->next = calloc(1, sizeof *thread_tls);
    /* definitely lost, in the thread's arena */
    malloc(600);
}

static void *thread_main(void *arg) {
    (void)arg;
    thread_make();
    scrub();
    char c = 1;
    if (write(ready[1], &c, 1) != 1) abort();
    read(never[0], &c, 1); /* runs until the process ends */
    return 0;
}

int main(void) {
    if (!gnu_get_libc_version()[0]) return 1;
    if (pipe(ready) || pipe(never)) return 1;
    pthread_t t;
    if (pthread_create(&t, 0, thread_main, 0)) return 1;
    char c;
    if (read(ready[0], &c, 1) != 1) return 1;
    make();
    scrub();
    return 0;
}
