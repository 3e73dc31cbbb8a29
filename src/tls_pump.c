/*
 * The TLS pump (include/relay/tls_pump.h).
 *
 * Every wake-up runs pump(): it tries each step of both directions until
 * none makes progress, noting which readiness each blocked step waits for,
 * then watches exactly that. Trying every step is what makes TLS's
 * cross-wants safe: SSL_read may need the socket writable and SSL_write
 * readable, and decrypted bytes may sit inside OpenSSL with nothing left to
 * read from the socket. A read is skipped, though, while its socket is
 * taken to be drained (an EAGAIN or a short read since it last turned
 * readable): epoll is level-triggered, so the watcher reports any bytes
 * left, and a request or reply costs no read that only hears EAGAIN.
 *
 * A request costs the loop no extra iteration either way: the owner kicks
 * the pump right after hiredis wrote, and the pump tells the owner when it
 * delivered, who feeds hiredis's read watcher (ev_feed_event: run in this
 * iteration, cleared if the watcher is stopped first).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "relay/tls.h"
#include "relay/tls_pump.h"

/* One TLS record's worth of plaintext per direction. */
#define PUMP_BUFFER 16384

enum { WANT_NET_READ = 1, WANT_NET_WRITE = 2, WANT_PLAIN_READ = 4, WANT_PLAIN_WRITE = 8 };

typedef enum { PHASE_CONNECTING, PHASE_HANDSHAKE, PHASE_OPEN, PHASE_FAILED } pump_phase;

typedef struct {
    char data[PUMP_BUFFER];
    size_t len, off; /* bytes held, bytes of them already passed on */
} pump_buffer;

struct relay_tls_pump {
    struct ev_loop *loop;
    SSL *ssl;
    int net_fd, plain_fd;
    ev_io net_read, net_write, plain_read, plain_write;
    pump_phase phase;
    int plain_closed;  /* hiredis's end closed: nothing more to send */
    int plain_drained; /* recv said EAGAIN since plain_fd last turned readable */
    int net_drained;   /* likewise SSL_read's WANT_READ for net_fd */
    unsigned wants;
    pump_buffer up;   /* from hiredis, to the server */
    pump_buffer down; /* from the server, to hiredis */
    relay_tls_pump_fail_fn on_fail;
    relay_tls_pump_delivered_fn on_delivered;
    void *ud;
    char error[512];
};


static void
fail(relay_tls_pump *p, const char *fmt, const char *detail)
{
    if (p->phase == PHASE_FAILED) {
        return;
    }
    p->phase = PHASE_FAILED;
    snprintf(p->error, sizeof(p->error), fmt, detail);
}


static void
fail_ssl(relay_tls_pump *p, int ret)
{
    char why[sizeof(p->error)];

    relay_tls_describe_failure(p->ssl, ret, why, sizeof(why));
    fail(p, "%s", why);
}


/* Records what a would-block SSL call waits for; anything else fails. */
static void
ssl_blocked(relay_tls_pump *p, int ret)
{
    int kind = SSL_get_error(p->ssl, ret);

    if (kind == SSL_ERROR_WANT_READ) {
        p->wants |= WANT_NET_READ;
    } else if (kind == SSL_ERROR_WANT_WRITE) {
        p->wants |= WANT_NET_WRITE;
    } else {
        fail_ssl(p, ret);
    }
}


/* SO_ERROR is 0 both once connected and while still connecting (a kick
 * can wake the pump then): getpeername tells them apart. */
static void
finish_tcp_connect(relay_tls_pump *p)
{
    int error = 0;
    socklen_t len = sizeof(error);
    struct sockaddr_storage peer;
    socklen_t peer_len = sizeof(peer);

    if (getsockopt(p->net_fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) {
        error = errno;
    }
    if (error == 0 && getpeername(p->net_fd, (struct sockaddr *)&peer, &peer_len) != 0) {
        error = errno == ENOTCONN ? EINPROGRESS : errno;
    }
    if (error == EINPROGRESS || error == EALREADY) {
        p->wants |= WANT_NET_WRITE;
    } else if (error != 0) {
        fail(p, "cannot connect: %s", strerror(error));
    } else {
        p->phase = PHASE_HANDSHAKE;
    }
}


static void
handshake(relay_tls_pump *p)
{
    int ret;

    ERR_clear_error();
    ret = SSL_connect(p->ssl);
    if (ret == 1) {
        p->phase = PHASE_OPEN;
    } else {
        ssl_blocked(p, ret);
    }
}


/* hiredis → up buffer. */
static int
take_from_plain(relay_tls_pump *p)
{
    ssize_t n;

    if (p->up.len != 0 || p->plain_closed) {
        return 0;
    }
    if (p->plain_drained) {
        p->wants |= WANT_PLAIN_READ;
        return 0;
    }
    n = recv(p->plain_fd, p->up.data, sizeof(p->up.data), 0);
    if (n > 0) {
        p->up.len = (size_t)n;
        p->up.off = 0;
        /* A short read emptied the socket: asking again would only hear
         * EAGAIN, and the watcher tells when more comes. */
        p->plain_drained = (size_t)n < sizeof(p->up.data);
        return 1;
    }
    if (n == 0) {
        p->plain_closed = 1; /* the owner is closing the connection */
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        p->plain_drained = 1;
        p->wants |= WANT_PLAIN_READ;
    } else if (errno != EINTR) {
        fail(p, "TLS pump: %s", strerror(errno));
    }
    return 0;
}


/* up buffer → TLS. */
static int
send_to_server(relay_tls_pump *p)
{
    int ret;

    if (p->up.off == p->up.len) {
        return 0;
    }
    ERR_clear_error();
    ret = SSL_write(p->ssl, p->up.data + p->up.off, (int)(p->up.len - p->up.off));
    if (ret <= 0) {
        ssl_blocked(p, ret);
        return 0;
    }
    p->up.off += (size_t)ret;
    if (p->up.off == p->up.len) {
        p->up.len = p->up.off = 0;
    }
    return 1;
}


/* TLS → down buffer. */
static int
take_from_server(relay_tls_pump *p)
{
    int ret;

    if (p->down.len != 0) {
        return 0;
    }
    if (p->net_drained && SSL_pending(p->ssl) == 0 && !SSL_has_pending(p->ssl)) {
        p->wants |= WANT_NET_READ;
        return 0;
    }
    ERR_clear_error();
    ret = SSL_read(p->ssl, p->down.data, (int)sizeof(p->down.data));
    if (ret <= 0) {
        p->net_drained = SSL_get_error(p->ssl, ret) == SSL_ERROR_WANT_READ;
        ssl_blocked(p, ret);
        return 0;
    }
    p->down.len = (size_t)ret;
    p->down.off = 0;
    /* A reply is mostly one record: once OpenSSL holds nothing more, the
     * socket is likely empty, and the watcher tells when it is not. */
    p->net_drained = !SSL_has_pending(p->ssl);
    return 1;
}


/* down buffer → hiredis. */
static int
give_to_plain(relay_tls_pump *p)
{
    ssize_t n;

    if (p->down.off == p->down.len) {
        return 0;
    }
    n = send(p->plain_fd, p->down.data + p->down.off, p->down.len - p->down.off, MSG_NOSIGNAL);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            p->wants |= WANT_PLAIN_WRITE;
        } else if (errno != EINTR) {
            fail(p, "TLS pump: %s", strerror(errno));
        }
        return 0;
    }
    p->down.off += (size_t)n;
    if (p->down.off == p->down.len) {
        p->down.len = p->down.off = 0;
    }
    return 1;
}


/* Whether anything reached the plaintext side. */
static int
stream(relay_tls_pump *p)
{
    int progress, delivered = 0;

    do {
        int gave;
        p->wants = 0;
        progress = take_from_plain(p);
        progress |= send_to_server(p);
        progress |= take_from_server(p);
        gave = give_to_plain(p);
        delivered |= gave;
        progress |= gave;
    } while (progress && p->phase == PHASE_OPEN);
    return delivered;
}


static void
watch(relay_tls_pump *p, ev_io *w, int wanted)
{
    if (wanted) {
        ev_io_start(p->loop, w);
    } else {
        ev_io_stop(p->loop, w);
    }
}


static void
watch_wants(relay_tls_pump *p)
{
    int failed = p->phase == PHASE_FAILED;

    watch(p, &p->net_read, !failed && (p->wants & WANT_NET_READ));
    watch(p, &p->net_write, !failed && (p->wants & WANT_NET_WRITE));
    watch(p, &p->plain_read, !failed && (p->wants & WANT_PLAIN_READ));
    watch(p, &p->plain_write, !failed && (p->wants & WANT_PLAIN_WRITE));
}


static void
pump(relay_tls_pump *p)
{
    int delivered = 0;

    p->wants = 0;
    if (p->phase == PHASE_CONNECTING) {
        finish_tcp_connect(p);
    }
    if (p->phase == PHASE_HANDSHAKE) {
        handshake(p);
    }
    if (p->phase == PHASE_OPEN) {
        delivered = stream(p);
    }
    watch_wants(p);
    if (delivered && p->on_delivered != NULL && p->phase != PHASE_FAILED) {
        p->on_delivered(p->ud);
    }
    if (p->phase == PHASE_FAILED && p->on_fail != NULL) {
        relay_tls_pump_fail_fn on_fail = p->on_fail;
        p->on_fail = NULL;
        on_fail(p->ud, p->error); /* last: it may free p */
    }
}


static void
ready(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    relay_tls_pump *p = w->data;

    if (w == &p->plain_read) {
        p->plain_drained = 0;
    } else if (w == &p->net_read) {
        p->net_drained = 0;
    }
    pump(p);
}


void
relay_tls_pump_on_delivered(relay_tls_pump *p, relay_tls_pump_delivered_fn on_delivered)
{
    p->on_delivered = on_delivered;
}


void
relay_tls_pump_kick(relay_tls_pump *p)
{
    ev_feed_event(p->loop, &p->plain_read, EV_READ);
}


relay_tls_pump *
relay_tls_pump_new(struct ev_loop *loop, SSL *ssl, int net_fd, int plain_fd, relay_tls_pump_fail_fn on_fail, void *ud)
{
    relay_tls_pump *p = calloc(1, sizeof(*p));

    if (p == NULL) {
        return NULL;
    }
    p->loop = loop;
    p->ssl = ssl;
    p->net_fd = net_fd;
    p->plain_fd = plain_fd;
    p->on_fail = on_fail;
    p->ud = ud;
    p->phase = PHASE_CONNECTING;
    ev_io_init(&p->net_read, ready, net_fd, EV_READ);
    ev_io_init(&p->net_write, ready, net_fd, EV_WRITE);
    ev_io_init(&p->plain_read, ready, plain_fd, EV_READ);
    ev_io_init(&p->plain_write, ready, plain_fd, EV_WRITE);
    p->net_read.data = p->net_write.data = p->plain_read.data = p->plain_write.data = p;
    /* The connect completes when the socket turns writable. */
    ev_io_start(loop, &p->net_write);
    return p;
}


int
relay_tls_pump_is_open(const relay_tls_pump *p)
{
    return p->phase == PHASE_OPEN;
}


void
relay_tls_pump_free(relay_tls_pump *p)
{
    if (p == NULL) {
        return;
    }
    ev_io_stop(p->loop, &p->net_read);
    ev_io_stop(p->loop, &p->net_write);
    ev_io_stop(p->loop, &p->plain_read);
    ev_io_stop(p->loop, &p->plain_write);
    SSL_free(p->ssl);
    close(p->net_fd);
    close(p->plain_fd);
    free(p);
}
