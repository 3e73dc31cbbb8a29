/*
 * Blocking Redis connections for short CLI commands (publish, status, dlq):
 * bounded connect and I/O timeouts, so an unreachable Redis fails fast.
 */
#include <stdio.h>
#include <sys/time.h>

#include "relay/redis_client.h"


static int
blocking_step(redisContext *c, char *err, size_t errlen, const char *what, redisReply *reply)
{
    if (reply == NULL) {
        snprintf(err, errlen, "%s failed: %s", what, c->errstr[0] ? c->errstr : "no reply");
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


int
relay_redis_handshake_blocking(redisContext *c, const relay_redis_addr *addr, char *err, size_t errlen)
{
    if (addr->password != NULL) {
        redisReply *reply = addr->user != NULL ? redisCommand(c, "AUTH %s %s", addr->user, addr->password)
                                               : redisCommand(c, "AUTH %s", addr->password);
        if (blocking_step(c, err, errlen, "AUTH", reply) != 0) {
            return -1;
        }
    }
    if (addr->db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", addr->db);
        if (blocking_step(c, err, errlen, "SELECT", redisCommand(c, "SELECT %s", db)) != 0) {
            return -1;
        }
    }
    return 0;
}


redisContext *
relay_redis_connect_blocking(const relay_redis_addr *addr, double timeout_s, char *err, size_t errlen)
{
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    char where[512];
    redisContext *c;

    relay_redis_addr_describe(addr, where, sizeof(where));
    c = addr->path ? redisConnectUnixWithTimeout(addr->path, tv) : redisConnectWithTimeout(addr->host, addr->port, tv);
    if (c == NULL || c->err) {
        snprintf(err, errlen, "cannot connect to redis at %s: %s", where, c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (relay_redis_handshake_blocking(c, addr, err, errlen) != 0) {
        char inner[256];
        snprintf(inner, sizeof(inner), "%s", err);
        snprintf(err, errlen, "redis at %s: %s", where, inner);
        redisFree(c);
        return NULL;
    }
    return c;
}
