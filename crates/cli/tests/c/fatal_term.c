/* A server stopped by a signal: a list of 100 nodes held from a global, 10
   blocks leaked, then "ready" on stdout and a wait for the signal.
   Usage: fatal_term [own|ignore]
     own:    installs its own SIGTERM and SIGINT handler in main (after the
             runtime's), which says "handler" and ends with the signal's
             default action, as servers that clean up do;
     exit:   its own SIGTERM handler exits cleanly (exit(0));
     ignore: ignores SIGTERM, then exits by itself after 1 s;
     parent: sends SIGTERM to its parent (heapdump run) before main, the
             moment it starts, as a user's kill right after the start. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
struct node { struct node *next; long v[5]; };
struct node *list;
static void clean_exit(int sig) {
    (void)sig;
    exit(0);
}
static void own(int sig) {
    static const char msg[] = "handler\n";
    write(1, msg, sizeof msg - 1);
    signal(sig, SIG_DFL);
    raise(sig);
}
__attribute__((noinline)) static void leak(void) {
    for (int i = 0; i < 10; i++) {
        void *volatile p = malloc(1000);
        p = 0;
    }
}
/* Overwrites the dead frames below main's, where the last leaked pointer
   may linger. */
__attribute__((noinline)) static void scrub(void) {
    volatile char buf[16384];
    memset((char *)buf, 0, sizeof buf);
}
__attribute__((constructor)) static void early(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "parent")) kill(getppid(), SIGTERM);
}
int main(int argc, char **argv) {
    for (int i = 0; i < 100; i++) {
        struct node *n = malloc(sizeof *n);
        n->next = list;
        list = n;
    }
    leak();
    scrub();
    if (argc > 1 && !strcmp(argv[1], "own")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = own;
        sigaction(SIGTERM, &sa, 0);
        signal(SIGINT, own);
    }
    if (argc > 1 && !strcmp(argv[1], "ignore")) signal(SIGTERM, SIG_IGN);
    if (argc > 1 && !strcmp(argv[1], "exit")) signal(SIGTERM, clean_exit);
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (argc > 1 && !strcmp(argv[1], "ignore")) {
        sleep(1);
        return 0;
    }
    for (;;) pause();
}
