/* The library another user would like a heapdump user to load: says so in
 * a file (the path is compiled in) as soon as it is loaded. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

__attribute__((constructor)) static void evil(void) {
    int fd = open(EVIL_MARK, O_WRONLY | O_CREAT | O_APPEND, 0666);
    if (fd >= 0) {
        char b[64];
        int n = snprintf(b, sizeof b, "evil code ran as uid %d\n", (int)getuid());
        (void)!write(fd, b, n);
        close(fd);
    }
}
