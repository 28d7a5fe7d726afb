/* The usual C service's heap (issue #39): a response cache, a linked list
   of 40000 `struct cached_response` nodes each owning a malloc'd string
   (`next` at offset 0), held by the static `cache_head`; a table of 10000
   `struct entry` blocks held by the static `table`; and an error path that
   leaks its request buffer. Each node dominates the next node and its own
   string: one structure, not 40000. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cached_response {
    struct cached_response *next;
    char *body;
    unsigned long key;
    unsigned long hits;
};

struct entry {
    unsigned long key;
    unsigned long value;
    char name[32];
};

struct cached_response *cache_head;
struct entry **table;

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
    snprintf(e->name, sizeof e->name, "entry %lu", i);
    table[i] = e;
}

/* An error path that forgets its buffer. */
static int handle_bad_request(int i) {
    char *request = malloc(512);
    snprintf(request, 512, "bad request %d", i);
    if (request[0] == 'b') return -1;
    free(request);
    return 0;
}

int main(void) {
    table = calloc(10000, sizeof *table);
    for (unsigned long i = 0; i < 10000; i++) table_put(i);
    for (unsigned long i = 0; i < 40000; i++) cache_put(i);
    for (int i = 0; i < 8; i++) handle_bad_request(i);
    return 0;
}
