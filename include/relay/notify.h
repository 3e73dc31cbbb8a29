/*
 * The service manager's readiness protocol (systemd's sd_notify, spoken
 * without libsystemd): state lines such as "READY=1" sent as one datagram to
 * the unix socket named by $NOTIFY_SOCKET (a path, or "@name" for the
 * abstract namespace), and the watchdog interval from $WATCHDOG_USEC (for
 * this process only when $WATCHDOG_PID is unset or names it). Without
 * $NOTIFY_SOCKET every send is a successful no-op, so callers need no
 * "under systemd?" branch.
 */
#ifndef RELAY_NOTIFY_H
#define RELAY_NOTIFY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

typedef struct {
    struct sockaddr_un addr;
    socklen_t addr_len;     /* 0: no service manager listens; sends do nothing */
    uint64_t watchdog_usec; /* 0: no watchdog for this process */
} relay_notify_target;

/* Fills t from the variables given (each may be NULL: unset). self is this
 * process's pid, compared with watchdog_pid. Returns 0, or -1 with err when
 * a variable is set but unusable (t then sends nothing and has no watchdog
 * for the bad part). */
int relay_notify_parse(relay_notify_target *t, const char *notify_socket, const char *watchdog_usec,
                       const char *watchdog_pid, pid_t self, char *err, size_t err_cap);

/* relay_notify_parse on this process's environment; with unset, the three
 * variables are then removed, so that no child (a runtime, a redis-server)
 * inherits the socket and speaks for this process. */
int relay_notify_from_env(relay_notify_target *t, int unset, char *err, size_t err_cap);

/* Sends state ("READY=1", "STOPPING=1", "WATCHDOG=1", "STATUS=...", lines
 * joined by '\n') as one datagram. Never blocks: a full socket buffer is an
 * error for this send only. Returns 0 (sent, or no socket), -1 with err. */
int relay_notify_send(const relay_notify_target *t, const char *state, char *err, size_t err_cap);

#endif
