/* 200 setenv calls: glibc's setenv keeps each new string in a search tree
   (tsearch), 200 nodes of 24 bytes, whose stack valgrind shows as
   malloc < tsearch < __add_to_environ < setenv < main. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    char name[32];
    for (int i = 0; i < 200; i++) {
        snprintf(name, sizeof name, "HD_VAR_%d", i);
        setenv(name, "value", 1);
    }
    return 0;
}
