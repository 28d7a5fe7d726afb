/* static_leaks.c as most static programs are: never asking glibc its
   version, so that glibc's banner ("GNU C Library ... release version")
   is not linked in. Its declaration is read first; the call then names
   a string of the program's own. */
#include <gnu/libc-version.h>
#define gnu_get_libc_version() "plain"
#include "static_leaks.c"
