/* Memory a program holds past malloc, or through it. "bump": 64 MiB of
   anonymous memory mapped and touched through a hand-made bump allocator
   (1M linked 64-byte nodes), no malloc call of its own. "malloc": the
   same nodes from malloc. "fragment": the nodes from malloc, all but
   every 64th freed (the heap's pages stay resident, its live bytes
   small). Exits 0. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define NODES (1 << 20)
struct node { struct node *next; char pad[56]; };
struct node *head;
static char *arena, *bump;

static void *bump_alloc(size_t n) {
    void *p = bump;
    bump += (n + 15) & ~(size_t)15;
    return p;
}

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "bump";
    static struct node *all[NODES];
    if (!strcmp(how, "bump")) {
        arena = bump = mmap(0, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (arena == MAP_FAILED) return 1;
    }
    for (int i = 0; i < NODES; i++) {
        struct node *n = !strcmp(how, "bump") ? bump_alloc(sizeof *n) : malloc(sizeof *n);
        memset(n, 1, sizeof *n);
        n->next = head;
        head = all[i] = n;
    }
    if (!strcmp(how, "fragment")) {
        head = 0;
        for (int i = 0; i < NODES; i++) {
            if (i % 64) {
                free(all[i]);
            } else {
                all[i]->next = head;
                head = all[i];
            }
        }
    }
    memset(all, 0, sizeof all);
    return 0;
}
