/* Three setenv calls: glibc keeps the new strings in a search tree whose
   root is a static of its own. valgrind: nothing lost, all still
   reachable. The runtime must not have called setenv itself first (its
   untracked tree root would hide the program's nodes). */
#include <stdlib.h>
int main(void) {
    setenv("HD_TEST_A", "x", 1);
    setenv("HD_TEST_B", "y", 1);
    setenv("HD_TEST_C", "z", 1);
    return getenv("HD_TEST_B")[0] == 'y' ? 0 : 1;
}
