/*
 * Fire-and-forget UDP (include/relay/udp.h). The socket is connected so a
 * send needs no address and an ICMP "port unreachable" surfaces as a
 * dropped datagram on a later send rather than an error anyone must handle.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "relay/udp.h"

struct relay_udp {
    int fd;
    uint64_t sent;
    uint64_t dropped;
};


static int
open_connected(const struct addrinfo *res, int *saved)
{
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) {
            *saved = errno;
            continue;
        }
        if (fcntl(fd, F_SETFL, O_NONBLOCK) == 0 && fcntl(fd, F_SETFD, FD_CLOEXEC) == 0
            && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            return fd;
        }
        *saved = errno;
        close(fd);
    }
    return -1;
}


relay_udp *
relay_udp_open(const char *host, int port, int allow_names, char *err, size_t err_cap)
{
    struct addrinfo hints, *res = NULL;
    char port_text[16];
    int rc, fd, saved = 0;
    relay_udp *u;

    if (port < 1 || port > 65535) {
        snprintf(err, err_cap, "port %d out of range", port);
        return NULL;
    }
    if (strcmp(host, "localhost") == 0) {
        host = "127.0.0.1";
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = allow_names ? 0 : AI_NUMERICHOST;
    snprintf(port_text, sizeof(port_text), "%d", port);
    rc = getaddrinfo(host, port_text, &hints, &res);
    if (rc != 0) {
        snprintf(err, err_cap, "cannot resolve %s: %s%s", host, gai_strerror(rc),
                 allow_names ? "" : " (names resolve only while the hooks file loads)");
        return NULL;
    }
    fd = open_connected(res, &saved);
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, err_cap, "cannot open udp socket to %s:%d: %s", host, port, strerror(saved));
        return NULL;
    }
    u = calloc(1, sizeof(*u));
    if (u == NULL) {
        close(fd);
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    u->fd = fd;
    return u;
}


int
relay_udp_send(relay_udp *u, const void *data, size_t len)
{
    ssize_t n;

    do {
        n = send(u->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        u->dropped++; /* EAGAIN, ENOBUFS, ECONNREFUSED, EMSGSIZE: never the caller's problem */
        return 0;
    }
    u->sent++;
    return 1;
}


void
relay_udp_counts(const relay_udp *u, uint64_t *sent, uint64_t *dropped)
{
    *sent = u->sent;
    *dropped = u->dropped;
}


void
relay_udp_close(relay_udp *u)
{
    if (u != NULL) {
        close(u->fd);
        free(u);
    }
}
