/*
 * Splicing a TLS pump under a hiredis async context (relay/redis_tls.h).
 */
#define _GNU_SOURCE /* dup3 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "relay/redis_tls.h"

/* As hiredis's redisEnableKeepAlive, which cannot be used: it would set
 * TCP options on hiredis's descriptor, now a unix socket. */
#define KEEPALIVE_IDLE_S 15


static void
enable_keepalive(int fd)
{
    int on = 1, idle = KEEPALIVE_IDLE_S, interval = KEEPALIVE_IDLE_S / 3, count = 3;

    /* Best effort, like hiredis's: a failure leaves the watchdogs to find a
     * half-open connection. */
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}


static void
close_pair(int pair[2])
{
    close(pair[0]);
    close(pair[1]);
}


relay_tls_pump *
relay_redis_tls_splice(struct ev_loop *loop, redisAsyncContext *ac, const relay_tls *tls, const char *host,
                       relay_tls_pump_fail_fn on_fail, void *ud, char *err, size_t errlen)
{
    int pair[2];
    int net_fd;
    SSL *ssl;
    relay_tls_pump *pump;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return NULL;
    }
    net_fd = fcntl(ac->c.fd, F_DUPFD_CLOEXEC, 0);
    if (net_fd < 0) {
        snprintf(err, errlen, "dup: %s", strerror(errno));
        close_pair(pair);
        return NULL;
    }
    ssl = relay_tls_session(tls, host, net_fd, err, errlen);
    if (ssl == NULL) {
        close(net_fd);
        close_pair(pair);
        return NULL;
    }
    pump = relay_tls_pump_new(loop, ssl, net_fd, pair[0], on_fail, ud);
    if (pump == NULL) {
        snprintf(err, errlen, "out of memory");
        SSL_free(ssl);
        close(net_fd);
        close_pair(pair);
        return NULL;
    }
    /* From here hiredis's descriptor is the socketpair's other end; the TCP
     * socket lives on as net_fd only. */
    if (dup3(pair[1], ac->c.fd, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "dup3: %s", strerror(errno));
        relay_tls_pump_free(pump); /* closes net_fd and pair[0] */
        close(pair[1]);
        return NULL;
    }
    close(pair[1]);
    enable_keepalive(net_fd);
    return pump;
}
