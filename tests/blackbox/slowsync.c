/*
 * tests/blackbox/slowsync.c - a slow disk for the black-box journal tests.
 *
 * Preloaded into the extender (LD_PRELOAD), it makes every fdatasync take
 * 10 ms longer, so that binds sent at once find a flush under way whatever
 * disk the tests run on (on tmpfs a flush takes no time, and whether two
 * binds ever meet at the journal would be luck).
 */
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int fdatasync(int fd)
{
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return (int)syscall(SYS_fdatasync, fd);
}
