/* leaks.c holding a message only glibc 2.42's malloc has (its per-thread
   cache of 76 lists, counting free slots): a static program whose strings
   say its glibc is newer than any layout heapdump reads. */
__attribute__((used)) static const char newer[] = "max tcache size too large";
#include "leaks.c"
