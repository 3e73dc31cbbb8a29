/*
 * Filesystem changes that never follow a symlink.
 *
 * Relay runs as root and prepares rootfs directories that app authors
 * ship (an `image:` inside the app). A symlink planted there (`tmp` ->
 * /etc, `.relay-init` -> /etc/cron.d/x) must not turn a mkdir, chmod or
 * create into a change of a host path. Every path below `root` is opened
 * one component at a time with O_NOFOLLOW; a symlink or `..` anywhere is an
 * error (ELOOP / EINVAL), never followed. `root` itself is trusted (Relay
 * resolved it) and may be a symlink.
 *
 * All functions return 0, or -1 with errno set and a message in err.
 */
#ifndef RELAY_SAFE_FS_H
#define RELAY_SAFE_FS_H

#include <stddef.h>
#include <sys/types.h>

/* Creates root/rel (and missing parents) and sets its mode; an existing
 * directory is kept but gets the mode. */
int relay_safe_mkdir(const char *root, const char *rel, mode_t mode, char *err, size_t errlen);

/* Creates the regular file root/rel if missing (empty, with mode). An
 * existing regular file is left as it is. */
int relay_safe_touch(const char *root, const char *rel, mode_t mode, char *err, size_t errlen);

/* Writes a new file at path (O_EXCL|O_NOFOLLOW: never an existing one). */
int relay_safe_write_new(const char *path, const char *data, size_t len, mode_t mode, char *err, size_t errlen);

/* Makes path a directory owned by this user with exactly mode: created if
 * missing; an existing one must be a real directory owned by us. */
int relay_safe_private_dir(const char *path, mode_t mode, char *err, size_t errlen);

/* An O_PATH descriptor of root/rel (rel NULL or "": root itself), opened
 * without following symlinks below root, close-on-exec. Returns the fd. */
int relay_safe_open_path(const char *root, const char *rel, char *err, size_t errlen);

#endif
