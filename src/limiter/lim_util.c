/*
 * limiter/lim_util.c - reading and writing <ledger dir>/util (lim_util.h).
 */
#include "limiter/lim_util.h"
#include "limiter/lim_ledger.h" /* lim_fstat */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int lim_util_read(const char *dir, struct lim_util *u)
{
    char path[LIM_DIR_MAX + 16];
    snprintf(path, sizeof path, "%s/" LIM_UTIL_FILE, dir);
    /* the directory is the container's: a FIFO made there must not block
     * the reader (the device plugin's control loop, its busy thread) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -1;
    struct stat st;
    if (lim_fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    ssize_t n;
    do
        n = read(fd, u, sizeof *u);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n != (ssize_t)sizeof *u || memcmp(u->magic, LIM_UTIL_MAGIC, 8) != 0 ||
        u->n_dev != LIM_MAX_DEV)
        return -1;
    return 0;
}

int lim_util_write(const char *dir, struct lim_util *u)
{
    char path[LIM_DIR_MAX + 16], tmp[LIM_DIR_MAX + 32];
    snprintf(path, sizeof path, "%s/" LIM_UTIL_FILE, dir);
    snprintf(tmp, sizeof tmp, "%s/." LIM_UTIL_FILE ".%d", dir, (int)getpid());
    memcpy(u->magic, LIM_UTIL_MAGIC, 8);
    u->n_dev = LIM_MAX_DEV;
    /* the directory is the container's: a FIFO in tmp's place must not
     * block the device plugin (ENXIO without a reader) */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, u, sizeof *u);
    int err = n == (ssize_t)sizeof *u ? 0 : (n < 0 ? errno : EIO);
    if (close(fd) < 0 && !err)
        err = errno;
    if (!err && rename(tmp, path) < 0)
        err = errno;
    if (err) {
        unlink(tmp);
        errno = err;
        return -1;
    }
    return 0;
}
