/* A program's own allocation wrappers, none of them on heapdump's list of
   names: recognised by what they do, also once stripped (then only
   .eh_frame tells where each function ends). app_alloc calls malloc and
   returns its result; zeroed_alloc is static (no name at all once
   stripped) and wraps app_alloc (a wrapper of a wrapper), then clears the
   block; checked_calloc is static too. push_value calls malloc but
   returns the list's length: it is a user of the block, a site itself.
   Sizes are exact: load_config 100 x 1000, build_index 200 x 300,
   read_rows 400 x 50 (all through wrappers), fill_list 1000 x 16 (through
   push_value), all kept. */
#include <stdlib.h>
#include <string.h>

struct node {
    struct node *next;
    long value;
};
struct list {
    struct node *head;
    int length;
};

void *kept[1000];
int nkept;
struct list values;

__attribute__((noinline)) void *app_alloc(size_t n) {
    void *p = malloc(n);
    if (!p)
        abort();
    return p;
}

__attribute__((noinline)) static void *zeroed_alloc(size_t n) {
    void *p = app_alloc(n);
    memset(p, 0, n);
    return p;
}

__attribute__((noinline)) static void *checked_calloc(size_t n) {
    void *p = calloc(1, n);
    if (!p)
        abort();
    return p;
}

__attribute__((noinline)) int push_value(struct list *l, long v) {
    struct node *n = malloc(sizeof *n);
    n->value = v;
    n->next = l->head;
    l->head = n;
    return ++l->length;
}

__attribute__((noinline)) static void load_config(void) {
    for (int i = 0; i < 100; i++)
        kept[nkept++] = app_alloc(1000);
}

__attribute__((noinline)) static void build_index(void) {
    for (int i = 0; i < 200; i++)
        kept[nkept++] = zeroed_alloc(300);
}

__attribute__((noinline)) static void read_rows(void) {
    for (int i = 0; i < 400; i++)
        kept[nkept++] = checked_calloc(50);
}

__attribute__((noinline)) static int fill_list(void) {
    int n = 0;
    for (int i = 0; i < 1000; i++)
        n = push_value(&values, i);
    return n;
}

int main(void) {
    load_config();
    build_index();
    read_rows();
    return fill_list() == 1000 ? 0 : 1;
}
