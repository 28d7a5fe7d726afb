/* Dumps itself (SIGUSR2, as a user would send it), then grows at one site;
   the exit dump follows. The diff of the two shows that growth. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
void *keep[1000];
__attribute__((noinline)) static void steady(void) { for (int i = 0; i < 100; i++) keep[i] = malloc(64); }
__attribute__((noinline)) static void growing(void) { for (int i = 100; i < 400; i++) keep[i] = malloc(256); }
int main(int argc, char **argv) {
    steady();
    raise(SIGUSR2);
    /* The dump is written by heapdump's helper thread: wait for its file. */
    for (int i = 0; i < 500 && access(argv[1], F_OK) != 0; i++) usleep(10000);
    usleep(100000);
    growing();
    return 0;
}
