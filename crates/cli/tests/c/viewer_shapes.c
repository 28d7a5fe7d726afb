/* The shapes the viewer must make readable (issue #39), dumped while
   `handle_request` is on the stack (SIGUSR2 raised from it):
   - a linked list of 40000 `struct cached_response` nodes, each owning a
     malloc'd string, held by the static `cache_head` (one structure: a
     collapsed chain, not 40000 nested rows);
   - 400 `struct entry` blocks from `table_put`, each held by its own slot
     of the static `slots` (400 identical rows at the root: one group);
   - a block held by each of those 400 entries and the static `owner`
     ("Held by (401)": paged too);
   - a block of 100000 pointers to 100000 small blocks, held by the static
     `fanout` ("Points to (100000)": paged to the end);
   - a request buffer held only by `handle_request`'s frame;
   - an error path that loses 8 request buffers. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cached_response {
    struct cached_response *next;
    char *body;
    unsigned long key;
    unsigned long hits;
};

struct entry {
    unsigned long key;
    unsigned long value;
    void *owner;
    char name[71];
};

struct cached_response *cache_head;
struct entry *slots[400];
void *owner;
void **fanout;

static void cache_put(unsigned long key) {
    struct cached_response *r = malloc(sizeof *r);
    char text[64];
    snprintf(text, sizeof text, "HTTP/1.1 200 OK response %lu", key);
    r->body = strdup(text);
    r->key = key;
    r->hits = 0;
    r->next = cache_head;
    cache_head = r;
}

static void table_put(unsigned long i) {
    struct entry *e = calloc(1, sizeof *e);
    e->key = i;
    e->value = i * 7;
    e->owner = owner;
    snprintf(e->name, sizeof e->name, "entry %lu", i);
    slots[i] = e;
}

static void fill_fanout(void) {
    fanout = malloc(100000 * sizeof *fanout);
    for (int i = 0; i < 100000; i++) fanout[i] = malloc(16);
}

/* An error path that forgets its buffer. */
static int handle_bad_request(int i) {
    char *request = malloc(512);
    snprintf(request, 512, "bad request %d", i);
    if (request[0] == 'b') return -1;
    free(request);
    return 0;
}

/* Holds its buffer in its frame while the dump is taken (the runtime's
   helper thread answers the signal and stops this thread where it
   sleeps). */
__attribute__((noinline)) static int handle_request(void) {
    char *volatile request = malloc(3000);
    snprintf(request, 3000, "GET /index.html");
    raise(SIGUSR2);
    sleep(1);
    int r = request[0];
    free(request);
    return r;
}

/* Zeroes the dead stack below main's frame, where the calls above left
   their locals: the thread is stopped either in `raise` or in `sleep`
   (on a busy machine), and their frames' unwritten slots would show
   whichever of those dead words they cover as roots (one run in thirty
   found the list head's own string held by `sleep`'s frame, and the
   head no longer its only holder). */
__attribute__((noinline)) static void clear_dead_stack(void) {
    volatile char dead[32768];
    memset((char *)dead, 0, sizeof dead);
}

int main(void) {
    owner = malloc(64);
    for (unsigned long i = 0; i < 400; i++) table_put(i);
    for (unsigned long i = 0; i < 40000; i++) cache_put(i);
    fill_fanout();
    for (int i = 0; i < 8; i++) handle_bad_request(i);
    clear_dead_stack();
    return handle_request() == 'G' ? 0 : 1;
}
