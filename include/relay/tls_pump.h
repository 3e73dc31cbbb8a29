/*
 * A TLS pump on the libev loop: moves bytes between a plaintext socket and
 * a TLS session over a TCP socket, both non-blocking.
 *
 * hiredis 0.14 has no TLS hooks, so TLS sits under it: hiredis talks
 * plaintext to one end of a socketpair, the pump owns the other end and
 * the TCP socket (src/redis_tls_splice.c does the wiring). Each direction
 * holds at most one fixed buffer and reads no more until it is written out,
 * so a slow reader (hiredis, or the server) stops the other side instead of
 * letting memory grow.
 *
 * The pump first waits for the TCP connect to complete, then runs the TLS
 * handshake, then streams. Any failure (connect, handshake, a TLS alert,
 * the server closing) stops it and runs on_fail once with a description.
 * on_fail runs last in one of the pump's own watcher callbacks, so the
 * owner may free the pump inside it.
 */
#ifndef RELAY_TLS_PUMP_H
#define RELAY_TLS_PUMP_H

#include <ev.h>

struct ssl_st;

typedef struct relay_tls_pump relay_tls_pump;

typedef void (*relay_tls_pump_fail_fn)(void *ud, const char *error);
typedef void (*relay_tls_pump_delivered_fn)(void *ud);

/* Takes ownership of ssl (set to net_fd, in connect state), net_fd (a TCP
 * socket, possibly still connecting) and plain_fd. NULL when out of memory;
 * then the caller still owns all three. */
relay_tls_pump *relay_tls_pump_new(struct ev_loop *loop, struct ssl_st *ssl, int net_fd, int plain_fd,
                                   relay_tls_pump_fail_fn on_fail, void *ud);

/* Runs on_delivered(ud) after a wake-up that passed bytes to plain_fd, so
 * the reader there can be run in the same loop iteration. Optional. */
void relay_tls_pump_on_delivered(relay_tls_pump *p, relay_tls_pump_delivered_fn on_delivered);

/* The plaintext side just wrote: the pump runs in this loop iteration
 * rather than after the next poll. */
void relay_tls_pump_kick(relay_tls_pump *p);

/* Whether the TLS handshake completed. */
int relay_tls_pump_is_open(const relay_tls_pump *p);

/* Stops the watchers, frees the session and closes both sockets. */
void relay_tls_pump_free(relay_tls_pump *p);

#endif
