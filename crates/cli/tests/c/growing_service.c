/* A service in four phases, dumping itself (SIGUSR2, as a user would send
   it) at the end of each: a cache (a list prepended at cache_head, each
   entry owning a string) grows by 3000 entries a phase; a larger table
   of 20000 records is built once and stays put; churn replaces a ring of
   buffers whose total goes 200, 400, 100, 300 KiB; a 48 MiB buffer lives
   only in phase 2. growth must name the cache, never the table, the
   churn or the spike. argv[1]: the -o path (later dumps .<pid>.<n>); argv[2]: the table's records. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct cached_response { struct cached_response *next; char *body; int id; };
struct record { long key; long value[6]; };

/* Not static: the compiler must keep every allocation. */
struct cached_response *cache_head;
struct record **table;
void *churn[1000];
char *big; static int records = 20000;

__attribute__((noinline)) static void cache_put(int id) {
    struct cached_response *e = malloc(sizeof *e);
    e->body = malloc(48);
    snprintf(e->body, 48, "response %d", id);
    e->id = id;
    e->next = cache_head;
    cache_head = e;
}

__attribute__((noinline)) static void build_table(void) {
    table = calloc(records, sizeof *table);
    for (int i = 0; i < records; i++) { table[i] = malloc(sizeof(struct record)); table[i]->key = i; }
}

__attribute__((noinline)) static void churn_to(size_t each) {
    for (int i = 0; i < 1000; i++) { free(churn[i]); churn[i] = malloc(each); memset(churn[i], 1, each); }
}

static void dump_and_wait(const char *out, int k) {
    char name[4096] = {0}; /* zeroed: see the note at the end */
    const char *dot = strrchr(out, '.');
    if (k == 0 || !dot) snprintf(name, sizeof name, "%s", out);
    else snprintf(name, sizeof name, "%.*s.%d.%d%s", (int)(dot - out), out, (int)getpid(), k, dot);
    raise(SIGUSR2);
    struct stat st = {0};
    for (int i = 0; i < 4000 && (stat(name, &st) != 0 || st.st_size == 0); i++) usleep(5000);
    usleep(20000);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2; if (argc > 2) records = atoi(argv[2]);
    static const size_t churn_kib[4] = {200, 400, 100, 300};
    build_table();
    int id = 0;
    for (int phase = 0; phase < 4; phase++) {
        for (int i = 0; i < 3000; i++) cache_put(id++);
        churn_to(churn_kib[phase] * 1024 / 1000);
        if (phase == 1) { big = malloc(48 << 20); memset(big, 2, 48 << 20); }
        if (phase == 2) { free(big); big = NULL; }
        dump_and_wait(argv[1], phase);
    }
    long sum = 0;
    for (int i = 0; i < records; i++) sum += table[i]->key;
    for (struct cached_response *e = cache_head; e; e = e->next) sum += e->id;
    return sum == 0;
}

/* dump_and_wait's name buffer is zeroed: left as they were, its 4 KiB of
   stack held what the phase's calls left there (snprintf's frames under
   cache_put), inside a live frame the dump reads as roots: a stale pointer
   to a cache entry made it a root of its own, and growth saw a step where
   the cache did not grow (4 runs in 6 under a release build). (A note
   here: the tests name this file's lines.) */
