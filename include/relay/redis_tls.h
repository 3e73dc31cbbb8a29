/*
 * TLS under hiredis 0.14, which has no TLS hooks of its own.
 *
 * Async (the daemon): hiredis opens the TCP connection as usual; the
 * splice then moves that socket to a TLS pump (relay/tls_pump.h) and puts
 * one end of a socketpair in its place, under the same descriptor number
 * (dup3), so hiredis reads and writes plaintext through the pump without
 * knowing. Its reader, reply cap, callbacks and the client's timers work
 * unchanged; the connect timer bounds the TLS handshake too, because the
 * connection only counts as ready once PING is answered through it.
 *
 * Blocking (the CLI): one command at a time, so no pump: hiredis connects
 * and formats commands and parses replies, and the bytes go through
 * SSL_write/SSL_read on its socket, bounded by its socket timeouts.
 */
#ifndef RELAY_REDIS_TLS_H
#define RELAY_REDIS_TLS_H

#include <stddef.h>

#include <ev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "relay/tls.h"
#include "relay/tls_pump.h"

/* Splices TLS under ac, whose TCP connect to host has just been started.
 * NULL with err filled on failure; ac is then unchanged. */
relay_tls_pump *relay_redis_tls_splice(struct ev_loop *loop, redisAsyncContext *ac, const relay_tls *tls,
                                       const char *host, relay_tls_pump_fail_fn on_fail, void *ud, char *err,
                                       size_t errlen);

/* Runs the TLS handshake on the connected blocking context c. Returns the
 * session, or NULL with err filled. */
struct ssl_st *relay_redis_tls_start_blocking(redisContext *c, const relay_tls *tls, const char *host, char *err,
                                              size_t errlen);

/* redisCommandArgv over the session: NULL on a transport failure, with
 * c->err set as hiredis does and the whole description in err. */
redisReply *relay_redis_tls_command_blocking(redisContext *c, struct ssl_st *ssl, int argc, const char **argv,
                                             const size_t *argvlen, char *err, size_t errlen);

#endif
