/* Dumps itself (SIGUSR2, as a user would send it), then grows at one site;
   the exit dump follows. The diff of the two shows that growth. */
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
void *keep[1000];
__attribute__((noinline)) static void steady(void) { for (int i = 0; i < 100; i++) keep[i] = malloc(64); }
__attribute__((noinline)) static void growing(void) { for (int i = 100; i < 400; i++) keep[i] = malloc(256); }
int main(int argc, char **argv) {
    steady();
    raise(SIGUSR2);
    /* heapdump's helper thread writes the dump while this thread is
       stopped, so once this thread sees bytes in the file, the dump is
       complete. */
    struct stat st;
    for (int i = 0; i < 2000 && (stat(argv[1], &st) != 0 || st.st_size == 0); i++) usleep(5000);
    growing();
    return 0;
}
