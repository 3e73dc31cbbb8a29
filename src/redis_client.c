/*
 * Async Redis client with reconnect, handshake and per-command watchdogs.
 *
 * hiredis 0.14 facts this file is built around:
 * - on any disconnect every pending callback runs with a NULL reply, then
 *   onDisconnect (only if the context had connected), then the context is
 *   freed: after that ac is dangling, so we forget it inside the callback;
 * - a failed connect calls onConnect(REDIS_ERR) and frees the context;
 * - redisAsyncFree must never run inside a hiredis callback, so resets are
 *   done from our own timers;
 * - there are no timeouts at all, hence the connect timer and watchdogs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/adapters/libev.h>
#include <hiredis/async.h>

#include "relay/log.h"
#include "relay/redis_client.h"

#define MAX_IN_FLIGHT 10000
#define CONNECT_TIMEOUT_S 5.0
#define BACKOFF_FIRST_S 0.1
#define BACKOFF_CAP_S 5.0

struct relay_redis_request {
    relay_redis *owner;
    relay_redis_reply_fn cb;
    void *privdata;
    ev_timer watchdog;
    double timeout_s;
    int answered; /* callback already ran (watchdog) or was cancelled */
    relay_redis_request *prev, *next;
};

typedef enum { CONN_IDLE, CONN_CONNECTING, CONN_HANDSHAKE, CONN_READY } conn_state;

struct relay_redis {
    struct ev_loop *loop;
    relay_redis_addr addr;
    char description[512];
    redisAsyncContext *ac;
    conn_state state;
    relay_redis_state_fn on_state;
    void *ud;
    ev_timer connect_timer; /* bounds connect + handshake */
    ev_timer retry_timer;   /* backoff between attempts, and deferred resets */
    int retry_is_reset;
    unsigned attempts;
    unsigned long reconnects;
    int was_ready;
    int closing;
    size_t in_flight;
    relay_redis_request *pending; /* requests whose callbacks hiredis still owes */
    char last_error[256];
};

static void start_connect(relay_redis *r);


static char *
dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}


void
relay_redis_addr_describe(const relay_redis_addr *addr, char *out, size_t cap)
{
    if (addr->path != NULL) {
        snprintf(out, cap, "unix:%s?db=%d", addr->path, addr->db);
    } else {
        snprintf(out, cap, "%s:%d/%d", addr->host, addr->port, addr->db);
    }
}


static void
set_error(relay_redis *r, const char *what, const char *detail)
{
    snprintf(r->last_error, sizeof(r->last_error), "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}


static void
notify_state(relay_redis *r, int connected)
{
    if (r->on_state != NULL) {
        r->on_state(r->ud, connected, connected ? NULL : r->last_error);
    }
}


static void
request_unlink(relay_redis_request *req)
{
    relay_redis *r = req->owner;

    if (req->prev) {
        req->prev->next = req->next;
    } else {
        r->pending = req->next;
    }
    if (req->next) {
        req->next->prev = req->prev;
    }
    r->in_flight--;
}


static void
request_answer(relay_redis_request *req, redisReply *reply, const char *error)
{
    if (req->answered) {
        return;
    }
    req->answered = 1;
    ev_timer_stop(req->owner->loop, &req->watchdog);
    req->cb(req->privdata, reply, error);
}


/* Schedules a reset of the current connection from the retry timer, outside
 * any hiredis frame. */
static void
schedule_reset(relay_redis *r)
{
    ev_timer_stop(r->loop, &r->retry_timer);
    r->retry_is_reset = 1;
    ev_timer_set(&r->retry_timer, 0., 0.);
    ev_timer_start(r->loop, &r->retry_timer);
}


static void
schedule_retry(relay_redis *r)
{
    double delay = BACKOFF_FIRST_S;

    if (r->closing) {
        return;
    }
    for (unsigned i = 0; i < r->attempts && delay < BACKOFF_CAP_S; i++) {
        delay *= 2;
    }
    if (delay > BACKOFF_CAP_S) {
        delay = BACKOFF_CAP_S;
    }
    /* Jitter keeps a fleet of replicas from reconnecting in lockstep. */
    delay *= 0.5 + 0.5 * ((double)rand() / RAND_MAX);
    r->attempts++;
    ev_timer_stop(r->loop, &r->retry_timer);
    r->retry_is_reset = 0;
    ev_timer_set(&r->retry_timer, delay, 0.);
    ev_timer_start(r->loop, &r->retry_timer);
}


static void
connection_gone(relay_redis *r)
{
    r->ac = NULL;
    r->state = CONN_IDLE;
    ev_timer_stop(r->loop, &r->connect_timer);
    notify_state(r, 0);
    schedule_retry(r);
}


static void
on_disconnect(const redisAsyncContext *ac, int status)
{
    relay_redis *r = ac->data;

    if (r == NULL) {
        return;
    }
    if (status != REDIS_OK || r->last_error[0] == '\0') {
        set_error(r, "connection lost", ac->errstr[0] ? ac->errstr : NULL);
    }
    connection_gone(r);
}


static void
on_connect(const redisAsyncContext *ac, int status)
{
    relay_redis *r = ac->data;

    if (r == NULL) {
        return;
    }
    if (status != REDIS_OK) {
        set_error(r, "cannot connect", ac->errstr);
        connection_gone(r); /* hiredis frees the context after this */
        return;
    }
    if (r->addr.path == NULL) {
        /* Half-open TCP is found by the watchdogs; keepalive helps idle
         * connections notice too. Unix sockets have no keepalive. */
        redisEnableKeepAlive((redisContext *)&ac->c);
    }
}


static void
handshake_reply(redisAsyncContext *ac, void *reply_ptr, void *privdata)
{
    relay_redis *r = ac->data;
    redisReply *reply = reply_ptr;
    int last_step = privdata != NULL;

    if (r == NULL || reply == NULL) {
        return; /* the disconnect path reports the failure */
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        set_error(r, "redis refused the handshake", reply->str);
        schedule_reset(r);
        return;
    }
    if (last_step && r->state == CONN_HANDSHAKE) {
        ev_timer_stop(r->loop, &r->connect_timer);
        r->state = CONN_READY;
        if (r->was_ready) {
            r->reconnects++;
        }
        r->was_ready = 1;
        r->attempts = 0;
        r->last_error[0] = '\0';
        notify_state(r, 1);
    }
}


static void
send_handshake(relay_redis *r)
{
    char db[16];
    static int last = 1;

    if (r->addr.password != NULL) {
        if (r->addr.user != NULL) {
            redisAsyncCommand(r->ac, handshake_reply, NULL, "AUTH %s %s", r->addr.user, r->addr.password);
        } else {
            redisAsyncCommand(r->ac, handshake_reply, NULL, "AUTH %s", r->addr.password);
        }
    }
    if (r->addr.db != 0) {
        snprintf(db, sizeof(db), "%d", r->addr.db);
        redisAsyncCommand(r->ac, handshake_reply, NULL, "SELECT %s", db);
    }
    /* PING last: the connection counts as ready only once Redis answers
     * (a server still LOADING refuses it, and we retry later). */
    redisAsyncCommand(r->ac, handshake_reply, &last, "PING");
}


static void
connect_timed_out(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    relay_redis *r = w->data;

    set_error(r, "cannot connect", "timed out");
    schedule_reset(r);
}


static void
reset_connection(relay_redis *r)
{
    redisAsyncContext *ac = r->ac;

    if (ac == NULL) {
        return;
    }
    if (r->state != CONN_READY) {
        /* hiredis will not call onDisconnect for a context that never
         * connected, so detach first and handle the loss ourselves. */
        ac->data = NULL;
        r->ac = NULL;
        redisAsyncFree(ac);
        connection_gone(r);
        return;
    }
    redisAsyncFree(ac); /* runs pending callbacks, then on_disconnect */
}


static void
retry_fired(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    relay_redis *r = w->data;

    if (r->retry_is_reset) {
        r->retry_is_reset = 0;
        reset_connection(r);
        return;
    }
    start_connect(r);
}


static void
start_connect(relay_redis *r)
{
    redisAsyncContext *ac;

    if (r->closing || r->ac != NULL) {
        return;
    }
    ac = r->addr.path ? redisAsyncConnectUnix(r->addr.path) : redisAsyncConnect(r->addr.host, r->addr.port);
    if (ac == NULL || ac->err) {
        set_error(r, "cannot connect", ac ? ac->errstr : "out of memory");
        if (ac) {
            redisAsyncFree(ac);
        }
        notify_state(r, 0);
        schedule_retry(r);
        return;
    }
    ac->data = r;
    r->ac = ac;
    r->state = CONN_HANDSHAKE;
    redisLibevAttach(r->loop, ac);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    send_handshake(r);
    ev_timer_set(&r->connect_timer, CONNECT_TIMEOUT_S, 0.);
    ev_timer_start(r->loop, &r->connect_timer);
}


relay_redis *
relay_redis_new(struct ev_loop *loop, const relay_redis_addr *addr, relay_redis_state_fn on_state, void *ud)
{
    relay_redis *r = calloc(1, sizeof(*r));

    if (r == NULL) {
        return NULL;
    }
    r->loop = loop;
    r->addr.host = dup_or_null(addr->host);
    r->addr.port = addr->port;
    r->addr.path = dup_or_null(addr->path);
    r->addr.user = dup_or_null(addr->user);
    r->addr.password = dup_or_null(addr->password);
    r->addr.db = addr->db;
    relay_redis_addr_describe(&r->addr, r->description, sizeof(r->description));
    r->on_state = on_state;
    r->ud = ud;
    ev_timer_init(&r->connect_timer, connect_timed_out, CONNECT_TIMEOUT_S, 0.);
    r->connect_timer.data = r;
    ev_timer_init(&r->retry_timer, retry_fired, 0., 0.);
    r->retry_timer.data = r;
    start_connect(r);
    return r;
}


void
relay_redis_free(relay_redis *r)
{
    if (r == NULL) {
        return;
    }
    r->closing = 1;
    r->on_state = NULL;
    ev_timer_stop(r->loop, &r->connect_timer);
    ev_timer_stop(r->loop, &r->retry_timer);
    if (r->ac != NULL) {
        redisAsyncContext *ac = r->ac;
        ac->data = NULL;
        r->ac = NULL;
        redisAsyncFree(ac);
    }
    /* Whatever hiredis did not answer (it always does on free) is failed
     * here so that no waiter is left parked. */
    while (r->pending != NULL) {
        relay_redis_request *req = r->pending;
        request_answer(req, NULL, "closed");
        request_unlink(req);
        free(req);
    }
    free(r->addr.host);
    free(r->addr.path);
    free(r->addr.user);
    free(r->addr.password);
    free(r);
}


int
relay_redis_is_connected(const relay_redis *r)
{
    return r->state == CONN_READY;
}


const char *
relay_redis_last_error(const relay_redis *r)
{
    return r->last_error[0] ? r->last_error : "not connected";
}


unsigned long
relay_redis_reconnect_count(const relay_redis *r)
{
    return r->reconnects;
}


const char *
relay_redis_describe(const relay_redis *r)
{
    return r->description;
}


static void
command_reply(redisAsyncContext *ac, void *reply_ptr, void *privdata)
{
    (void)ac;
    relay_redis_request *req = privdata;

    request_answer(req, reply_ptr, reply_ptr ? NULL : "connection lost");
    request_unlink(req);
    free(req);
}


static void
watchdog_fired(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    relay_redis_request *req = w->data;
    relay_redis *r = req->owner;
    char msg[64];

    snprintf(msg, sizeof(msg), "timeout after %.1fs (connection reset)", req->timeout_s);
    set_error(r, "connection reset", "a command got no reply in time");
    request_answer(req, NULL, msg);
    schedule_reset(r);
}


relay_redis_request *
relay_redis_command(relay_redis *r, int argc, const char **argv, const size_t *argvlen, double timeout_s,
                    relay_redis_reply_fn cb, void *privdata, char *err, size_t errlen)
{
    relay_redis_request *req;

    if (r->state != CONN_READY || r->ac == NULL) {
        snprintf(err, errlen, "not connected to redis at %s: %s", r->description, relay_redis_last_error(r));
        return NULL;
    }
    if (r->in_flight >= MAX_IN_FLIGHT) {
        snprintf(err, errlen, "too many redis commands in flight (%d)", MAX_IN_FLIGHT);
        return NULL;
    }
    req = calloc(1, sizeof(*req));
    if (req == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    req->owner = r;
    req->cb = cb;
    req->privdata = privdata;
    if (redisAsyncCommandArgv(r->ac, command_reply, req, argc, argv, argvlen) != REDIS_OK) {
        snprintf(err, errlen, "redis connection to %s is closing", r->description);
        free(req);
        return NULL;
    }
    req->next = r->pending;
    if (r->pending) {
        r->pending->prev = req;
    }
    r->pending = req;
    r->in_flight++;
    ev_timer_init(&req->watchdog, watchdog_fired, timeout_s, 0.);
    req->timeout_s = timeout_s;
    req->watchdog.data = req;
    ev_timer_start(r->loop, &req->watchdog);
    return req;
}


void
relay_redis_cancel(relay_redis_request *req)
{
    if (req == NULL || req->answered) {
        return;
    }
    req->answered = 1;
    ev_timer_stop(req->owner->loop, &req->watchdog);
}
