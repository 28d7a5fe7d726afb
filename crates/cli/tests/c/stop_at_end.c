/* Linked into a test program: at its end (a destructor, after main has
   returned, as valgrind sees the program when it checks for leaks) the
   program stops itself when STOP_AT_END is set, for `heapdump attach` or
   gcore to take it as it is; SIGCONT lets it exit. With DUMP_FIRST=PATH
   it first has the preloaded runtime dump (SIGUSR2) into PATH and waits
   for the file to be complete. It says "stopped PID" on stderr. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
__attribute__((destructor)) static void stop_at_end(void) {
    if (!getenv("STOP_AT_END")) return;
    const char *dump = getenv("DUMP_FIRST");
    if (dump) {
        raise(SIGUSR2);
        for (int i = 0; i < 6000; i++) {
            struct stat st;
            if (stat(dump, &st) == 0 && st.st_size > 0) {
                usleep(50000);
                off_t last = st.st_size;
                if (stat(dump, &st) == 0 && st.st_size == last) break;
            }
            usleep(10000);
        }
    }
    char line[64];
    int n = snprintf(line, sizeof line, "stopped %d\n", (int)getpid());
    write(2, line, n);
    raise(SIGSTOP);
}
