/* Built with musl-gcc: creates the file named by its argument (so a test
   can tell whether it ever started), keeps a block and exits 0. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
void *kept;
int main(int argc, char **argv) {
    if (argc > 1) close(open(argv[1], O_WRONLY | O_CREAT, 0600));
    kept = malloc(4242);
    memset(kept, 1, 4242);
    return 0;
}
