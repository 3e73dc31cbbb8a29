/*
 * Blocking Redis connections for short CLI commands (publish, status, dlq):
 * bounded connect and I/O timeouts, so an unreachable Redis fails fast.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#include <openssl/ssl.h>

#include "relay/redis_client.h"
#include "relay/redis_tls.h"

struct relay_redis_sync {
    redisContext *ctx;
    relay_tls *tls; /* NULL: plaintext */
    SSL *ssl;
    char tls_error[512]; /* why a TLS command failed (hiredis's errstr is too short) */
};


void
relay_redis_sync_free(relay_redis_sync *s)
{
    if (s == NULL) {
        return;
    }
    SSL_free(s->ssl); /* before redisFree closes the socket under it */
    relay_tls_free(s->tls);
    redisFree(s->ctx);
    free(s);
}


redisReply *
relay_redis_sync_command(relay_redis_sync *s, int argc, const char **argv, const size_t *argvlen)
{
    if (s->ssl != NULL) {
        return relay_redis_tls_command_blocking(s->ctx, s->ssl, argc, argv, argvlen, s->tls_error,
                                                sizeof(s->tls_error));
    }
    return redisCommandArgv(s->ctx, argc, argv, argvlen);
}


const char *
relay_redis_sync_error(const relay_redis_sync *s)
{
    if (!s->ctx->err) {
        return NULL;
    }
    if (s->tls_error[0] != '\0') {
        return s->tls_error;
    }
    return s->ctx->errstr[0] ? s->ctx->errstr : "no reply";
}


static int
blocking_step(relay_redis_sync *s, char *err, size_t errlen, const char *what, int argc, const char **argv)
{
    redisReply *reply = relay_redis_sync_command(s, argc, argv, NULL);

    if (reply == NULL) {
        const char *why = relay_redis_sync_error(s);
        snprintf(err, errlen, "%s failed: %s", what, why ? why : "no reply");
        return -1;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s refused: %s", what, reply->str);
        freeReplyObject(reply);
        return -1;
    }
    freeReplyObject(reply);
    return 0;
}


static int
handshake(relay_redis_sync *s, const relay_redis_addr *addr, char *err, size_t errlen)
{
    if (addr->password != NULL) {
        const char *with_user[] = {"AUTH", addr->user, addr->password};
        const char *password_only[] = {"AUTH", addr->password};
        int rc = addr->user != NULL ? blocking_step(s, err, errlen, "AUTH", 3, with_user)
                                    : blocking_step(s, err, errlen, "AUTH", 2, password_only);
        if (rc != 0) {
            return -1;
        }
    }
    if (addr->db != 0) {
        char db[16];
        const char *select[] = {"SELECT", db};
        snprintf(db, sizeof(db), "%d", addr->db);
        if (blocking_step(s, err, errlen, "SELECT", 2, select) != 0) {
            return -1;
        }
    }
    if (s->ssl != NULL) {
        /* Under TLS 1.3 a server refuses a client certificate only after the
         * client's handshake is done: a round trip makes that a connect
         * failure rather than the first command's. */
        const char *ping[] = {"PING"};
        return blocking_step(s, err, errlen, "PING", 1, ping);
    }
    return 0;
}


/* The plaintext connection, and TLS on it for rediss://. */
static int
open_transport(relay_redis_sync *s, const relay_redis_addr *addr, struct timeval tv, char *err, size_t errlen)
{
    s->ctx =
        addr->path ? redisConnectUnixWithTimeout(addr->path, tv) : redisConnectWithTimeout(addr->host, addr->port, tv);
    if (s->ctx == NULL || s->ctx->err) {
        snprintf(err, errlen, "%s", s->ctx ? s->ctx->errstr : "out of memory");
        return -1;
    }
    redisSetTimeout(s->ctx, tv);
    if (addr->tls == NULL || addr->path != NULL) {
        return 0;
    }
    s->tls = relay_tls_new(addr->tls, err, errlen);
    if (s->tls == NULL) {
        return -1;
    }
    s->ssl = relay_redis_tls_start_blocking(s->ctx, s->tls, addr->host, err, errlen);
    return s->ssl != NULL ? 0 : -1;
}


relay_redis_sync *
relay_redis_connect_blocking(const relay_redis_addr *addr, double timeout_s, char *err, size_t errlen)
{
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    relay_redis_sync *s = calloc(1, sizeof(*s));
    char where[512], inner[640];

    relay_redis_addr_describe(addr, where, sizeof(where));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (open_transport(s, addr, tv, inner, sizeof(inner)) != 0) {
        snprintf(err, errlen, "cannot connect to redis at %s: %s", where, inner);
        relay_redis_sync_free(s);
        return NULL;
    }
    if (handshake(s, addr, inner, sizeof(inner)) != 0) {
        snprintf(err, errlen, "redis at %s: %s", where, inner);
        relay_redis_sync_free(s);
        return NULL;
    }
    return s;
}
