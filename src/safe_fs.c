/*
 * Filesystem changes that never follow a symlink (see relay/safe_fs.h).
 */
/* O_PATH */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "relay/safe_fs.h"

#define COMPONENT_MAX 256

/* A directory step: O_PATH needs no read permission, O_NOFOLLOW with
 * O_DIRECTORY refuses a symlink (ENOTDIR/ELOOP) instead of following it. */
#define DIR_STEP (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)


static int
fail(char *err, size_t errlen, const char *what, const char *path)
{
    int e = errno;

    if (e == ENOTDIR || e == ELOOP) {
        snprintf(err, errlen, "%s %s: a component is a symlink or not a directory (never followed)", what, path);
        errno = ELOOP;
        return -1;
    }
    snprintf(err, errlen, "%s %s: %s", what, path, strerror(e));
    errno = e;
    return -1;
}


/* Copies the next component of *rest into name; skips "." and empty ones.
 * Returns 1 with a component, 0 at the end, -1 on ".." or an over-long one. */
static int
next_component(const char **rest, char *name)
{
    const char *p = *rest;
    size_t len;

    for (;;) {
        while (*p == '/') {
            p++;
        }
        if (*p == '\0') {
            *rest = p;
            return 0;
        }
        len = strcspn(p, "/");
        if (len >= COMPONENT_MAX || (len == 2 && p[0] == '.' && p[1] == '.')) {
            errno = len >= COMPONENT_MAX ? ENAMETOOLONG : EINVAL;
            return -1;
        }
        *rest = p + len;
        if (len == 1 && p[0] == '.') {
            p += len;
            continue;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        return 1;
    }
}


/* Walks rel below dirfd (which it consumes), creating missing directories
 * with mode when create is set, up to but not including the last component,
 * which is left in last. Returns the parent's fd or -1. */
static int
walk_parent(int dirfd, const char *rel, int create, mode_t mode, char *last)
{
    char name[COMPONENT_MAX];
    const char *rest = rel;
    int r, fd, have = 0;

    last[0] = '\0';
    while ((r = next_component(&rest, name)) == 1) {
        if (have) {
            fd = openat(dirfd, last, DIR_STEP);
            if (fd < 0 && errno == ENOENT && create) {
                if (mkdirat(dirfd, last, mode) != 0 && errno != EEXIST) {
                    break;
                }
                fd = openat(dirfd, last, DIR_STEP);
            }
            if (fd < 0) {
                break;
            }
            close(dirfd);
            dirfd = fd;
        }
        memcpy(last, name, strlen(name) + 1);
        have = 1;
    }
    if (r != 0 || !have) {
        int e = r == 0 && !have ? EINVAL : errno;
        close(dirfd);
        errno = e;
        return -1;
    }
    return dirfd;
}


static int
open_root(const char *root)
{
    return open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
}


int
relay_safe_mkdir(const char *root, const char *rel, mode_t mode, char *err, size_t errlen)
{
    char last[COMPONENT_MAX];
    int dirfd, fd, rc;

    dirfd = open_root(root);
    if (dirfd < 0) {
        return fail(err, errlen, "open", root);
    }
    dirfd = walk_parent(dirfd, rel, 1, 0755, last);
    if (dirfd < 0) {
        return fail(err, errlen, "mkdir", rel);
    }
    if (mkdirat(dirfd, last, mode) != 0 && errno != EEXIST) {
        close(dirfd);
        return fail(err, errlen, "mkdir", rel);
    }
    fd = openat(dirfd, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(dirfd);
    if (fd < 0) {
        return fail(err, errlen, "mkdir", rel);
    }
    rc = fchmod(fd, mode);
    close(fd);
    return rc == 0 ? 0 : fail(err, errlen, "chmod", rel);
}


int
relay_safe_touch(const char *root, const char *rel, mode_t mode, char *err, size_t errlen)
{
    char last[COMPONENT_MAX];
    struct stat st;
    int dirfd, fd;

    dirfd = open_root(root);
    if (dirfd < 0) {
        return fail(err, errlen, "open", root);
    }
    dirfd = walk_parent(dirfd, rel, 0, 0, last);
    if (dirfd < 0) {
        return fail(err, errlen, "create", rel);
    }
    fd = openat(dirfd, last, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    close(dirfd);
    if (fd < 0) {
        return fail(err, errlen, "create", rel);
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return fail(err, errlen, "create (not a regular file)", rel);
    }
    close(fd);
    return 0;
}


int
relay_safe_write_new(const char *path, const char *data, size_t len, mode_t mode, char *err, size_t errlen)
{
    size_t done = 0;
    ssize_t n;
    int fd, e;

    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) {
        return fail(err, errlen, "create", path);
    }
    while (done < len) {
        n = write(fd, data + done, len - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            e = errno;
            close(fd);
            unlink(path);
            errno = e ? e : EIO;
            return fail(err, errlen, "write", path);
        }
        done += (size_t)n;
    }
    if (close(fd) != 0) {
        return fail(err, errlen, "close", path);
    }
    return 0;
}


int
relay_safe_private_dir(const char *path, mode_t mode, char *err, size_t errlen)
{
    struct stat st;

    if (mkdir(path, mode) != 0 && errno != EEXIST) {
        return fail(err, errlen, "mkdir", path);
    }
    if (lstat(path, &st) != 0) {
        return fail(err, errlen, "stat", path);
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
        errno = EPERM;
        snprintf(err, errlen, "%s: not a directory owned by uid %u (refusing to use it)", path, (unsigned)geteuid());
        return -1;
    }
    if ((st.st_mode & 07777) != mode && chmod(path, mode) != 0) {
        return fail(err, errlen, "chmod", path);
    }
    return 0;
}


int
relay_safe_open_path(const char *root, const char *rel, char *err, size_t errlen)
{
    char last[COMPONENT_MAX];
    int dirfd, fd;

    dirfd = open_root(root);
    if (dirfd < 0) {
        return fail(err, errlen, "open", root);
    }
    if (rel == NULL || rel[0] == '\0') {
        return dirfd;
    }
    dirfd = walk_parent(dirfd, rel, 0, 0, last);
    if (dirfd < 0) {
        return fail(err, errlen, "open", rel);
    }
    fd = openat(dirfd, last, DIR_STEP);
    close(dirfd);
    return fd >= 0 ? fd : fail(err, errlen, "open", rel);
}
