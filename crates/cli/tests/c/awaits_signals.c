/* Holds 5 blocks of 4242 bytes, says "ready PID" on stdout, then reads
   stdin until it closes and exits. It installs no signal handler: a
   signal the runtime does not take has its default action. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
void *kept[5];
int main(void) {
    for (int i = 0; i < 5; i++) kept[i] = malloc(4242);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}
