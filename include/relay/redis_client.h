/*
 * Redis connections for Relay: hiredis async on the libev loop for the
 * daemon, blocking hiredis for short CLI commands.
 *
 * The async client owns reconnection (capped, jittered backoff from a timer),
 * the AUTH/SELECT/PING handshake, a watchdog timer per command (hiredis 0.14
 * has no timeouts: a half-open connection would wait forever) and a cap on
 * commands in flight. While disconnected, commands fail at once: callers back
 * off instead of piling commands into an output buffer.
 */
#ifndef RELAY_REDIS_CLIENT_H
#define RELAY_REDIS_CLIENT_H

#include <stddef.h>

#include <ev.h>
#include <hiredis/hiredis.h>

#include "relay/tls.h"

typedef struct {
    char *host; /* NULL for a unix socket */
    int port;
    char *path;     /* unix socket path, or NULL */
    char *user;     /* NULL: AUTH with password only (or none) */
    char *password; /* NULL: no AUTH */
    int db;
    const relay_tls_options *tls; /* rediss://: TLS over TCP; NULL: plaintext */
} relay_redis_addr;

typedef struct relay_redis relay_redis;
typedef struct relay_redis_request relay_redis_request;

/* Runs exactly once per command unless the request was cancelled. reply is
 * NULL when error is set ("connection lost", "timeout …"); it is valid only
 * during the call. */
typedef void (*relay_redis_reply_fn)(void *privdata, redisReply *reply, const char *error);

/* Runs on every transition: connected = 1 after a successful handshake,
 * 0 when a connection attempt failed or an established one was lost. */
typedef void (*relay_redis_state_fn)(void *ud, int connected, const char *error);

/* Copies addr. Starts connecting at once. NULL with err filled when the
 * TLS settings cannot be used (a file missing, a key not matching). */
relay_redis *relay_redis_new(struct ev_loop *loop, const relay_redis_addr *addr, relay_redis_state_fn on_state,
                             void *ud, char *err, size_t errlen);

/* Fails every pending command with "closed" (their callbacks run) and frees. */
void relay_redis_free(relay_redis *r);

int relay_redis_is_connected(const relay_redis *r);
const char *relay_redis_last_error(const relay_redis *r);
unsigned long relay_redis_reconnect_count(const relay_redis *r);

/* What one reply object costs against the cap below, on top of its bytes:
 * hiredis's redisReply and its allocation. Callers that bound what they ask
 * for (relay.classify) count entries with the same figure. */
#define RELAY_REDIS_REPLY_OBJECT_BYTES 64

/* Frees a reply of an async connection, whose string objects hold their
 * bytes (freeReplyObject must not see them); replies of hiredis's own making
 * too. NULL is a no-op. */
void relay_redis_free_reply(void *reply);

/* Caps what one reply may hold while it is read (its buffered bytes plus
 * the objects built from it; 0 = no cap, the default). A reply over the cap
 * resets the connection, and its command fails with "reply too large …":
 * the daemon never holds more of a reply than it asked for, whatever a
 * stream entry weighs. */
void relay_redis_limit_reply(relay_redis *r, size_t max_bytes);

/* Human-readable address: "127.0.0.1:6379/0" or "unix:/path?db=0". */
const char *relay_redis_describe(const relay_redis *r);
void relay_redis_addr_describe(const relay_redis_addr *addr, char *out, size_t cap);

/* Sends a command. On failure returns NULL with err filled (not connected,
 * too many in flight) and the callback never runs. timeout_s bounds the
 * wait for the reply; when it fires the connection is reset, because a
 * command that got no answer in time means the connection is not trusted. */
relay_redis_request *relay_redis_command(relay_redis *r, int argc, const char **argv, const size_t *argvlen,
                                         double timeout_s, relay_redis_reply_fn cb, void *privdata, char *err,
                                         size_t errlen);

/* The callback will not run; the reply, if it comes, is dropped. */
void relay_redis_cancel(relay_redis_request *req);

/* A blocking connection (src/redis_blocking.c), plaintext or TLS. */
typedef struct relay_redis_sync relay_redis_sync;

/* Connects with connect and I/O timeouts and runs the handshake (AUTH,
 * SELECT). NULL with err filled on failure. */
relay_redis_sync *relay_redis_connect_blocking(const relay_redis_addr *addr, double timeout_s, char *err,
                                               size_t errlen);

/* Sends one command and waits for its reply (the caller frees it). NULL
 * on a transport failure: see relay_redis_sync_error. */
redisReply *relay_redis_sync_command(relay_redis_sync *s, int argc, const char **argv, const size_t *argvlen);

/* Why the connection broke, or NULL while it works. */
const char *relay_redis_sync_error(const relay_redis_sync *s);

void relay_redis_sync_free(relay_redis_sync *s);

#endif
