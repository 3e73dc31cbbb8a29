/*
 * The readiness protocol (include/relay/notify.h), implemented here instead
 * of linking libsystemd: it is one sendto() on a unix datagram socket, and
 * the library would add a dependency (and its own dependencies) to every
 * install, including those never run under systemd.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relay/notify.h"


static int
parse_socket(relay_notify_target *t, const char *text, char *err, size_t err_cap)
{
    size_t len = strlen(text);

    if (text[0] != '/' && text[0] != '@') {
        /* Other forms (vsock:...) belong to virtual machines, not a service. */
        snprintf(err, err_cap, "NOTIFY_SOCKET must be an absolute path or @name, not \"%s\"", text);
        return -1;
    }
    if (len < 2 || len >= sizeof(t->addr.sun_path)) {
        snprintf(err, err_cap, "NOTIFY_SOCKET has an unusable length (%zu bytes)", len);
        return -1;
    }
    memset(&t->addr, 0, sizeof(t->addr));
    t->addr.sun_family = AF_UNIX;
    memcpy(t->addr.sun_path, text, len);
    if (text[0] == '@') {
        /* Abstract: a leading NUL, and the length says where the name ends. */
        t->addr.sun_path[0] = '\0';
        t->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    } else {
        t->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
    }
    return 0;
}


static int
parse_uint(const char *text, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (text[0] < '0' || text[0] > '9') {
        return -1;
    }
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0') {
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}


int
relay_notify_parse(relay_notify_target *t, const char *notify_socket, const char *watchdog_usec,
                   const char *watchdog_pid, pid_t self, char *err, size_t err_cap)
{
    uint64_t usec = 0, pid = 0;
    int rc = 0;

    memset(t, 0, sizeof(*t));
    if (notify_socket != NULL && notify_socket[0] != '\0' && parse_socket(t, notify_socket, err, err_cap) != 0) {
        t->addr_len = 0;
        rc = -1;
    }
    if (watchdog_usec == NULL || watchdog_usec[0] == '\0') {
        return rc;
    }
    if (parse_uint(watchdog_usec, &usec) != 0 || usec == 0) {
        snprintf(err, err_cap, "WATCHDOG_USEC must be a positive whole number, not \"%s\"", watchdog_usec);
        return -1;
    }
    if (watchdog_pid != NULL && watchdog_pid[0] != '\0') {
        if (parse_uint(watchdog_pid, &pid) != 0) {
            snprintf(err, err_cap, "WATCHDOG_PID must be a pid, not \"%s\"", watchdog_pid);
            return -1;
        }
        if (pid != (uint64_t)self) {
            /* The watchdog is some other process's (a parent that exec'd us
             * kept the variables): pinging it would hide that process's hang. */
            return rc;
        }
    }
    t->watchdog_usec = usec;
    return rc;
}


int
relay_notify_from_env(relay_notify_target *t, int unset, char *err, size_t err_cap)
{
    int rc = relay_notify_parse(t, getenv("NOTIFY_SOCKET"), getenv("WATCHDOG_USEC"), getenv("WATCHDOG_PID"), getpid(),
                                err, err_cap);

    if (unset) {
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        unsetenv("WATCHDOG_PID");
    }
    return rc;
}


int
relay_notify_send(const relay_notify_target *t, const char *state, char *err, size_t err_cap)
{
    size_t len = strlen(state);
    ssize_t n;
    int fd, saved;

    if (t->addr_len == 0) {
        return 0;
    }
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, err_cap, "notify socket: %s", strerror(errno));
        return -1;
    }
    do {
        n = sendto(fd, state, len, MSG_NOSIGNAL, (const struct sockaddr *)&t->addr, t->addr_len);
    } while (n < 0 && errno == EINTR);
    saved = errno;
    close(fd);
    if (n < 0) {
        snprintf(err, err_cap, "notify: sending to %s%s: %s", t->addr.sun_path[0] == '\0' ? "@" : "",
                 t->addr.sun_path[0] == '\0' ? t->addr.sun_path + 1 : t->addr.sun_path, strerror(saved));
        return -1;
    }
    if ((size_t)n != len) {
        snprintf(err, err_cap, "notify: short send (%zd of %zu bytes)", n, len);
        return -1;
    }
    return 0;
}
