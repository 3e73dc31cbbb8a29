/*
 * A small, strict HTTP/1.x responder on a libev loop, for /metrics and
 * /healthz (README, Observability). No thread, never blocking: every socket is
 * non-blocking and driven by ev_io watchers on the caller's loop.
 *
 * Policy: GET only (405 otherwise), one request per connection (the reply
 * carries "Connection: close"), the request head is bounded (431 past the
 * limit), malformed requests get 400, each connection has one deadline for
 * its whole life, and past the connection limit new clients get 503.
 */
#ifndef RELAY_HTTP_SERVER_H
#define RELAY_HTTP_SERVER_H

#include <stddef.h>

#include <ev.h>

typedef struct relay_http_server relay_http_server;

/* What a handler answers. body is copied before the handler's caller returns,
 * so it may point at transient memory (a Lua string on the stack). */
typedef struct {
    int status;
    const char *content_type;
    const char *body;
    size_t body_len;
} relay_http_response;

/* Called from the loop for each well-formed GET; path excludes the query.
 * Must not block. Leaving status at 0 answers 500. cleanup (may be NULL)
 * runs once the body was copied. */
typedef void (*relay_http_handler)(void *ud, const char *method, const char *path, relay_http_response *resp);
typedef void (*relay_http_cleanup)(void *ud);

typedef struct {
    size_t max_request_bytes; /* request line + headers; 0 = 8192 */
    double timeout_s;         /* whole connection; 0 = 10 */
    int max_connections;      /* 0 = 32 */
} relay_http_limits;

/* Binds host:port (numeric or a name resolved now; port 0 picks one) and
 * starts accepting on loop. Returns NULL and fills err on failure. */
relay_http_server *relay_http_listen(struct ev_loop *loop, const char *host, int port, const relay_http_limits *limits,
                                     relay_http_handler handler, relay_http_cleanup cleanup, void *ud, char *err,
                                     size_t err_cap);

/* The bound port (useful after port 0). */
int relay_http_port(const relay_http_server *s);

/* Connections open now. */
int relay_http_connections(const relay_http_server *s);

/* Stops listening, closes every connection and frees s. */
void relay_http_close(relay_http_server *s);

#endif
