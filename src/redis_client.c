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
 * - there are no timeouts at all, hence the connect timer and watchdogs;
 * - there is no TLS: for rediss:// a pump is spliced under the context
 *   (relay/redis_tls.h) and lives exactly as long as it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/adapters/libev.h>
#include <hiredis/async.h>
#include <hiredis/sds.h>

#include "relay/log.h"
#include "relay/redis_client.h"
#include "relay/redis_tls.h"

#define MAX_IN_FLIGHT 10000
#define CONNECT_TIMEOUT_S 5.0
#define BACKOFF_FIRST_S 0.1
#define BACKOFF_CAP_S 5.0
/* The read buffer a connection keeps between replies (hiredis: 16 KiB). A
 * read batch of small entries makes replies of tens of KiB: below this
 * the buffer is reused, not grown by doubling and freed at every reply
 * (glibc then consolidated its heap at each such free: ~5 % of the
 * daemon's unmatched path). */
#define READ_BUFFER_KEPT_BYTES (256 * 1024)

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
    char last_error[768];
    size_t max_reply;       /* bytes one reply may hold while it is read; 0 = no cap */
    size_t reply_bytes;     /* what the reply being read holds so far (see count_object) */
    char reset_reason[128]; /* why the connection is being reset, for the callbacks it fails */
    relay_tls *tls;         /* rediss://: shared by every connection; NULL: plaintext */
    relay_tls_pump *pump;   /* the current connection's TLS, when tls is set */
};

static void start_connect(relay_redis *r);
static void reset_connection(relay_redis *r);


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
        snprintf(out, cap, "%s:%d/%d%s", addr->host, addr->port, addr->db, addr->tls ? " (tls)" : "");
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


/* The TLS under a context goes with it: its socketpair end would only
 * ever see EOF, and its TCP socket is the connection being dropped. */
static void
drop_tls(relay_redis *r)
{
    relay_tls_pump_free(r->pump);
    r->pump = NULL;
}


static void
connection_gone(relay_redis *r)
{
    /* A reset for a reply too large says nothing about the server: connect
     * again at once rather than after a backoff. */
    int deliberate = r->reset_reason[0] != '\0';

    drop_tls(r);
    r->ac = NULL;
    r->state = CONN_IDLE;
    r->reset_reason[0] = '\0'; /* the failed commands were told already */
    ev_timer_stop(r->loop, &r->connect_timer);
    notify_state(r, 0);
    if (deliberate && !r->closing) {
        ev_timer_stop(r->loop, &r->retry_timer);
        r->retry_is_reset = 0;
        ev_timer_set(&r->retry_timer, 0., 0.);
        ev_timer_start(r->loop, &r->retry_timer);
        return;
    }
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
    if (r->addr.path == NULL && r->tls == NULL) {
        /* Half-open TCP is found by the watchdogs; keepalive helps idle
         * connections notice too. Unix sockets have no keepalive; under TLS
         * the splice set it on the TCP socket. */
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


/* The reader's own object functions, which the counting ones below wrap. */
static redisReplyObjectFunctions *hiredis_objects;


/* Charges one reply object to the reply being read. A top-level object
 * starts a new reply; privdata is the connection (set in limit_replies). */
static void
count_object(const redisReadTask *task, size_t bytes)
{
    relay_redis *r = task->privdata;

    if (r == NULL) {
        return;
    }
    if (task->parent == NULL) {
        r->reply_bytes = 0;
    }
    r->reply_bytes += RELAY_REDIS_REPLY_OBJECT_BYTES + bytes;
}


/* A string object and its bytes in one allocation (hiredis makes two):
 * a stream entry is mostly strings, and the allocator's share of the
 * daemon's unmatched path was its largest. relay_redis_free_reply frees it. */
static void *
counted_string(const redisReadTask *task, char *str, size_t len)
{
    redisReply *r = malloc(sizeof(*r) + len + 1);

    if (r == NULL) {
        return NULL;
    }
    count_object(task, len);
    memset(r, 0, sizeof(*r));
    r->type = task->type;
    r->str = (char *)(r + 1);
    memcpy(r->str, str, len);
    r->str[len] = '\0';
    r->len = len;
    if (task->parent != NULL) {
        ((redisReply *)task->parent->obj)->element[task->idx] = r;
    }
    return r;
}


/* An element's slot in its array's vector is part of that element's object
 * cost, so an array costs one object like any other. */
static void *
counted_array(const redisReadTask *task, int elements)
{
    count_object(task, 0);
    return hiredis_objects->createArray(task, elements);
}


static void *
counted_integer(const redisReadTask *task, long long value)
{
    count_object(task, 0);
    return hiredis_objects->createInteger(task, value);
}


static void *
counted_nil(const redisReadTask *task)
{
    count_object(task, 0);
    return hiredis_objects->createNil(task);
}


void
relay_redis_free_reply(void *obj)
{
    redisReply *r = obj;

    if (r == NULL) {
        return;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->element != NULL) {
        for (size_t i = 0; i < r->elements; i++) {
            relay_redis_free_reply(r->element[i]);
        }
        free(r->element);
    } else if (r->str != NULL && r->str != (char *)(r + 1)) {
        free(r->str); /* a string of hiredis's own making */
    }
    free(r);
}


static redisReplyObjectFunctions counting_objects = {
    counted_string, counted_array, counted_integer, counted_nil, relay_redis_free_reply,
};


/* What the reader holds of the reply in progress: the bytes it buffered
 * and not parsed yet (a bulk string is parsed only once complete) plus the
 * objects it already built. */
static size_t
reply_held(const relay_redis *r)
{
    const redisReader *reader = r->ac->c.reader;

    return (reader->len - reader->pos) + (reader->ridx >= 0 ? r->reply_bytes : 0);
}


/* The libev read callback: hiredis's own, then the cap. hiredis reads at
 * most 16 KiB per call, so a reply is cut off within that of the cap; the
 * command that asked for it fails with reset_reason. */
static void
capped_read(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    redisLibevEvents *e = w->data;
    redisAsyncContext *ac = e->context;
    relay_redis *r = ac->data;

    redisAsyncHandleRead(ac);
    /* A disconnect inside the call freed ac; r->ac says whether it lives. */
    if (r == NULL || r->ac != ac || r->max_reply == 0 || reply_held(r) <= r->max_reply) {
        return;
    }
    snprintf(r->reset_reason, sizeof(r->reset_reason), "reply too large (over %zu bytes; connection reset)",
             r->max_reply);
    set_error(r, "reply too large", NULL);
    reset_connection(r);
}


/* Counts what every reply holds and checks it after each read. */
static void
limit_replies(relay_redis *r, redisAsyncContext *ac)
{
    redisReader *reader = ac->c.reader;
    redisLibevEvents *e = ac->ev.data;

    if (hiredis_objects == NULL) {
        hiredis_objects = reader->fn;
    }
    reader->fn = &counting_objects;
    reader->privdata = r;
    reader->maxbuf = READ_BUFFER_KEPT_BYTES;
    ev_set_cb(&e->rev, capped_read);
}


/* The pump stopped: the TLS handshake or the connection under it failed.
 * The reset runs from the retry timer like any other. */
static void
tls_failed(void *ud, const char *error)
{
    relay_redis *r = ud;

    set_error(r, r->state == CONN_READY ? "connection lost" : "cannot connect", error);
    schedule_reset(r);
}


static int
splice_tls(relay_redis *r, redisAsyncContext *ac)
{
    char err[256];

    if (r->tls == NULL) {
        return 0;
    }
    r->pump = relay_redis_tls_splice(r->loop, ac, r->tls, r->addr.host, tls_failed, r, err, sizeof(err));
    if (r->pump == NULL) {
        set_error(r, "cannot connect", err);
        return -1;
    }
    return 0;
}


/* hiredis's libev write callback, then the pump takes what it wrote in
 * this loop iteration instead of after the next poll. */
static void
write_then_kick(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    redisLibevEvents *e = w->data;
    redisAsyncContext *ac = e->context;
    relay_redis *r = ac->data;

    redisAsyncHandleWrite(ac);
    /* A disconnect inside the call freed ac (and the pump with it). */
    if (r != NULL && r->ac == ac && r->pump != NULL) {
        relay_tls_pump_kick(r->pump);
    }
}


/* The pump passed a reply's bytes on: hiredis reads them in this loop
 * iteration (through capped_read, so the cap holds). */
static void
tls_delivered(void *ud)
{
    relay_redis *r = ud;

    if (r->ac != NULL) {
        redisLibevEvents *e = r->ac->ev.data;
        ev_feed_event(r->loop, &e->rev, EV_READ);
    }
}


/* Saves the loop a poll per hop between hiredis and the pump. */
static void
couple_pump(relay_redis *r, redisAsyncContext *ac)
{
    redisLibevEvents *e = ac->ev.data;

    if (r->pump == NULL) {
        return;
    }
    ev_set_cb(&e->wev, write_then_kick);
    relay_tls_pump_on_delivered(r->pump, tls_delivered);
}


static void
start_connect(relay_redis *r)
{
    redisAsyncContext *ac;

    if (r->closing || r->ac != NULL) {
        return;
    }
    ac = r->addr.path ? redisAsyncConnectUnix(r->addr.path) : redisAsyncConnect(r->addr.host, r->addr.port);
    if (ac == NULL || ac->err || splice_tls(r, ac) != 0) {
        if (ac == NULL || ac->err) {
            set_error(r, "cannot connect", ac ? ac->errstr : "out of memory");
        }
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
    limit_replies(r, ac);
    couple_pump(r, ac);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    send_handshake(r);
    /* A caller that ran long outside the loop (a Lua task before
     * redis.connect) left the loop's time behind: counted from it, the
     * timeout would end early, even at once. */
    ev_now_update(r->loop);
    ev_timer_set(&r->connect_timer, CONNECT_TIMEOUT_S, 0.);
    ev_timer_start(r->loop, &r->connect_timer);
}


relay_redis *
relay_redis_new(struct ev_loop *loop, const relay_redis_addr *addr, relay_redis_state_fn on_state, void *ud, char *err,
                size_t errlen)
{
    relay_redis *r = calloc(1, sizeof(*r));

    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (addr->tls != NULL && addr->path == NULL && (r->tls = relay_tls_new(addr->tls, err, errlen)) == NULL) {
        free(r);
        return NULL;
    }
    r->loop = loop;
    r->addr.host = dup_or_null(addr->host);
    r->addr.port = addr->port;
    r->addr.path = dup_or_null(addr->path);
    r->addr.user = dup_or_null(addr->user);
    r->addr.password = dup_or_null(addr->password);
    r->addr.db = addr->db;
    r->addr.tls = addr->tls;
    relay_redis_addr_describe(&r->addr, r->description, sizeof(r->description));
    r->addr.tls = NULL; /* the caller's; r->tls holds what it said */
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
    drop_tls(r);
    relay_tls_free(r->tls);
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


void
relay_redis_limit_reply(relay_redis *r, size_t max_bytes)
{
    r->max_reply = max_bytes;
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


/* Frees the reader's buffer once it holds nothing unread, as hiredis itself
 * does only when the next bytes arrive: after a large reply the buffer is as
 * large as its largest string, and would sit beside the reply while the
 * callback converts it and until the next reply comes. */
static void
release_read_buffer(redisReader *reader)
{
    sds fresh;

    if (reader->len != 0 || reader->maxbuf == 0 || sdsavail(reader->buf) <= reader->maxbuf) {
        return;
    }
    fresh = sdsempty();
    if (fresh != NULL) { /* else keep the old one: it still works */
        sdsfree(reader->buf);
        reader->buf = fresh;
        reader->pos = 0;
    }
}


static void
command_reply(redisAsyncContext *ac, void *reply_ptr, void *privdata)
{
    relay_redis *r = ac->data;
    relay_redis_request *req = privdata;
    const char *lost = r != NULL && r->reset_reason[0] ? r->reset_reason : "connection lost";

    if (reply_ptr != NULL) {
        release_read_buffer(ac->c.reader);
    }
    request_answer(req, reply_ptr, reply_ptr ? NULL : lost);
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
    ev_now_update(r->loop); /* as for the connect timer: the caller may have run long */
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
