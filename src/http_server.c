/*
 * A small, strict HTTP/1.x responder on libev (see include/relay/http_server.h).
 *
 * Why not a library: Debian's embeddable servers either run their own
 * threads or select loop (libmicrohttpd, civetweb), bring their own loop
 * (h2o-evloop, libevhtp on libevent), or are parsers only. Two GET
 * endpoints need a few hundred lines that stay on our loop and never block.
 *
 * Each connection lives through READING (until the blank line ending the
 * head), WRITING (the whole reply, queued at once) and LINGER (our side shut
 * down, the peer's leftovers read and dropped so that closing does not reset
 * the connection before the peer read the reply). One timer bounds it all.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "relay/http_server.h"

#define DEFAULT_MAX_REQUEST 8192
#define DEFAULT_TIMEOUT_S 10.0
#define DEFAULT_MAX_CONNECTIONS 32
#define LINGER_S 2.0
#define ACCEPT_PAUSE_S 1.0
#define MAX_METHOD 16
#define MAX_PATH 1024

enum conn_state { READING, WRITING, LINGER };

typedef struct conn {
    struct conn *next, *prev;
    relay_http_server *srv;
    int fd;
    enum conn_state state;
    ev_io io;
    ev_timer timer;
    char *in;
    size_t in_len;
    char *out;
    size_t out_len, out_off;
} conn;

struct relay_http_server {
    struct ev_loop *loop;
    int fd;
    int port;
    ev_io accept_io;
    ev_timer accept_pause;
    relay_http_limits lim;
    relay_http_handler handler;
    relay_http_cleanup cleanup;
    void *ud;
    conn *conns;
    int nconns;
};

static const char BUSY_REPLY[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                                 "Content-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n";


static const char *
status_text(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}


static int
set_nonblocking(int fd)
{
    int flags = fcntl(fd, F_GETFL, 0);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        return -1;
    }
    return fcntl(fd, F_SETFD, FD_CLOEXEC);
}


static void
conn_close(conn *c)
{
    relay_http_server *s = c->srv;

    ev_io_stop(s->loop, &c->io);
    ev_timer_stop(s->loop, &c->timer);
    close(c->fd);
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        s->conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    s->nconns--;
    free(c->in);
    free(c->out);
    free(c);
}


/* tchar of RFC 9110 section 5.6.2. */
static int
is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')
           || (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}


/* Splits the request line; returns 0 or an HTTP status. */
static int
parse_request_line(const char *p, size_t len, char *method, char *path, int *minor)
{
    size_t i = 0, start;

    while (i < len && is_tchar((unsigned char)p[i])) {
        i++;
    }
    if (i == 0 || i >= MAX_METHOD || i >= len || p[i] != ' ') {
        return 400;
    }
    memcpy(method, p, i);
    method[i] = '\0';
    start = ++i;
    while (i < len && p[i] > 0x20 && p[i] < 0x7f && p[i] != '#') {
        i++;
    }
    if (i == start || p[start] != '/' || i >= len || p[i] != ' ' || i - start >= MAX_PATH) {
        return 400;
    }
    memcpy(path, p + start, i - start);
    path[i - start] = '\0';
    i++;
    if (len - i != 8 || memcmp(p + i, "HTTP/", 5) != 0 || p[i + 6] != '.' || p[i + 5] < '0' || p[i + 5] > '9'
        || p[i + 7] < '0' || p[i + 7] > '9') {
        return 400;
    }
    if (p[i + 5] != '1') {
        return 505;
    }
    *minor = p[i + 7] - '0';
    return 0;
}


/* Checks one header line; counts Host and rejects request bodies. */
static int
parse_header(const char *p, size_t len, int *hosts)
{
    size_t i = 0;

    while (i < len && is_tchar((unsigned char)p[i])) {
        i++;
    }
    if (i == 0 || i >= len || p[i] != ':') {
        return 400; /* also obs-fold and whitespace before the colon */
    }
    for (size_t j = i + 1; j < len; j++) {
        unsigned char ch = (unsigned char)p[j];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            return 400;
        }
    }
    if (i == 4 && strncasecmp(p, "host", 4) == 0) {
        (*hosts)++;
    } else if ((i == 17 && strncasecmp(p, "transfer-encoding", 17) == 0)) {
        return 400;
    } else if (i == 14 && strncasecmp(p, "content-length", 14) == 0) {
        size_t j = i + 1;
        while (j < len && (p[j] == ' ' || p[j] == '\t')) {
            j++;
        }
        if (len - j != 1 || p[j] != '0') {
            return 400; /* GET carries no body here */
        }
    }
    return 0;
}


/* Parses the head (everything before the blank line, which is excluded).
 * Returns 0 for a well-formed request, or the error status. */
static int
parse_head(const char *head, size_t len, char *method, char *path)
{
    const char *line = head, *end = head + len;
    int minor = 0, hosts = 0, status;

    for (size_t i = 0; i < len; i++) {
        if ((head[i] == '\n' && (i == 0 || head[i - 1] != '\r'))
            || (head[i] == '\r' && (i + 1 >= len || head[i + 1] != '\n')) || head[i] == '\0') {
            return 400; /* bare CR or LF, or NUL */
        }
    }
    for (int first = 1; line < end; first = 0) {
        const char *eol = memchr(line, '\r', (size_t)(end - line));
        size_t n = eol != NULL ? (size_t)(eol - line) : (size_t)(end - line);
        status = first ? parse_request_line(line, n, method, path, &minor) : parse_header(line, n, &hosts);
        if (status != 0) {
            return status;
        }
        line += n + 2;
    }
    if (hosts > 1 || (minor >= 1 && hosts != 1)) {
        return 400;
    }
    return strcmp(method, "GET") == 0 ? 0 : 405;
}


static void
queue_reply(conn *c, int status, const char *type, const char *body, size_t body_len)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Cache-Control: no-store\r\n%sConnection: close\r\n\r\n",
                     status, status_text(status), type, body_len, status == 405 ? "Allow: GET\r\n" : "");

    c->out = malloc((size_t)n + body_len);
    if (c->out == NULL) {
        conn_close(c);
        return;
    }
    memcpy(c->out, head, (size_t)n);
    memcpy(c->out + n, body, body_len);
    c->out_len = (size_t)n + body_len;
    c->out_off = 0;
    c->state = WRITING;
    ev_io_stop(c->srv->loop, &c->io);
    ev_io_set(&c->io, c->fd, EV_WRITE);
    ev_io_start(c->srv->loop, &c->io);
}


static void
queue_error(conn *c, int status)
{
    char body[64];
    int n = snprintf(body, sizeof(body), "%s\n", status_text(status));

    queue_reply(c, status, "text/plain; charset=utf-8", body, (size_t)n);
}


static void
respond(conn *c, const char *head, size_t len)
{
    relay_http_server *s = c->srv;
    char method[MAX_METHOD], path[MAX_PATH];
    relay_http_response resp = {0, NULL, NULL, 0};
    int status = parse_head(head, len, method, path);
    char *query;

    if (status != 0) {
        queue_error(c, status);
        return;
    }
    query = strchr(path, '?');
    if (query != NULL) {
        *query = '\0';
    }
    s->handler(s->ud, method, path, &resp);
    if (resp.status < 100 || resp.status > 599) {
        queue_error(c, 500);
    } else {
        queue_reply(c, resp.status, resp.content_type ? resp.content_type : "text/plain; charset=utf-8",
                    resp.body ? resp.body : "", resp.body ? resp.body_len : 0);
    }
    if (s->cleanup != NULL) {
        s->cleanup(s->ud);
    }
}


/* Reads what is there; answers once the head is complete or too large. */
static void
on_readable(conn *c)
{
    size_t cap = c->srv->lim.max_request_bytes;

    for (;;) {
        size_t before = c->in_len;
        ssize_t n = recv(c->fd, c->in + c->in_len, cap - c->in_len, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        if (n <= 0) {
            conn_close(c); /* the peer left before finishing its request */
            return;
        }
        c->in_len += (size_t)n;
        for (size_t i = before >= 3 ? before - 3 : 0; i + 2 <= c->in_len; i++) {
            if (i + 4 <= c->in_len && memcmp(c->in + i, "\r\n\r\n", 4) == 0) {
                respond(c, c->in, i);
                return;
            }
            if (memcmp(c->in + i, "\n\n", 2) == 0) {
                queue_error(c, 400); /* bare LF line ends: refuse rather than wait */
                return;
            }
        }
        if (c->in_len == cap) {
            queue_error(c, 431);
            return;
        }
    }
}


static void
enter_linger(conn *c)
{
    relay_http_server *s = c->srv;

    shutdown(c->fd, SHUT_WR);
    c->state = LINGER;
    ev_io_stop(s->loop, &c->io);
    ev_io_set(&c->io, c->fd, EV_READ);
    ev_io_start(s->loop, &c->io);
    ev_timer_stop(s->loop, &c->timer);
    ev_timer_set(&c->timer, LINGER_S, 0.);
    ev_timer_start(s->loop, &c->timer);
}


static void
on_writable(conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        if (n < 0) {
            conn_close(c);
            return;
        }
        c->out_off += (size_t)n;
    }
    enter_linger(c);
}


static void
drain_linger(conn *c)
{
    char sink[1024];

    for (;;) {
        ssize_t n = recv(c->fd, sink, sizeof(sink), 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        if (n <= 0) {
            conn_close(c);
            return;
        }
    }
}


static void
conn_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    conn *c = w->data;

    (void)loop;
    (void)revents;
    switch (c->state) {
    case READING:
        on_readable(c);
        break;
    case WRITING:
        on_writable(c);
        break;
    case LINGER:
        drain_linger(c);
        break;
    }
}


static void
conn_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    conn *c = w->data;

    (void)loop;
    (void)revents;
    conn_close(c); /* a slow or silent client gets nothing, not a stall */
}


static void
conn_open(relay_http_server *s, int fd)
{
    conn *c = calloc(1, sizeof(*c));

    if (c == NULL || (c->in = malloc(s->lim.max_request_bytes)) == NULL) {
        free(c);
        close(fd);
        return;
    }
    c->srv = s;
    c->fd = fd;
    c->state = READING;
    ev_io_init(&c->io, conn_io_cb, fd, EV_READ);
    c->io.data = c;
    ev_timer_init(&c->timer, conn_timeout_cb, s->lim.timeout_s, 0.);
    c->timer.data = c;
    c->next = s->conns;
    if (s->conns != NULL) {
        s->conns->prev = c;
    }
    s->conns = c;
    s->nconns++;
    ev_io_start(s->loop, &c->io);
    ev_timer_start(s->loop, &c->timer);
}


static void
accept_pause_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    relay_http_server *s = w->data;

    (void)revents;
    ev_io_start(loop, &s->accept_io);
}


static void
accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    relay_http_server *s = w->data;

    (void)revents;
    for (int i = 0; i < 16; i++) {
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors: the listener would stay readable and spin. */
                ev_io_stop(loop, &s->accept_io);
                ev_timer_set(&s->accept_pause, ACCEPT_PAUSE_S, 0.);
                ev_timer_start(loop, &s->accept_pause);
            }
            return;
        }
        if (set_nonblocking(fd) < 0) {
            close(fd);
        } else if (s->nconns >= s->lim.max_connections) {
            (void)send(fd, BUSY_REPLY, sizeof(BUSY_REPLY) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            close(fd);
        } else {
            conn_open(s, fd);
        }
    }
}


static int
bind_listener(const char *host, int port, int *bound_port, char *err, size_t err_cap)
{
    struct addrinfo hints, *res = NULL, *ai;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char port_text[16], serv[16];
    int fd = -1, rc, saved = 0, one = 1;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(port_text, sizeof(port_text), "%d", port);
    rc = getaddrinfo(host, port_text, &hints, &res);
    if (rc != 0) {
        snprintf(err, err_cap, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (set_nonblocking(fd) == 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) {
            break;
        }
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, err_cap, "cannot listen on %s:%d: %s", host, port, strerror(saved));
        return -1;
    }
    *bound_port = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, serv, sizeof(serv), NI_NUMERICSERV) == 0) {
            *bound_port = atoi(serv);
        }
    }
    return fd;
}


relay_http_server *
relay_http_listen(struct ev_loop *loop, const char *host, int port, const relay_http_limits *limits,
                  relay_http_handler handler, relay_http_cleanup cleanup, void *ud, char *err, size_t err_cap)
{
    relay_http_server *s;
    int bound = 0;
    int fd = bind_listener(host, port, &bound, err, err_cap);

    if (fd < 0) {
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        close(fd);
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->fd = fd;
    s->port = bound;
    s->handler = handler;
    s->cleanup = cleanup;
    s->ud = ud;
    s->lim.max_request_bytes = limits && limits->max_request_bytes ? limits->max_request_bytes : DEFAULT_MAX_REQUEST;
    s->lim.timeout_s = limits && limits->timeout_s > 0 ? limits->timeout_s : DEFAULT_TIMEOUT_S;
    s->lim.max_connections = limits && limits->max_connections > 0 ? limits->max_connections : DEFAULT_MAX_CONNECTIONS;
    ev_io_init(&s->accept_io, accept_cb, fd, EV_READ);
    s->accept_io.data = s;
    ev_timer_init(&s->accept_pause, accept_pause_cb, ACCEPT_PAUSE_S, 0.);
    s->accept_pause.data = s;
    ev_io_start(loop, &s->accept_io);
    return s;
}


int
relay_http_port(const relay_http_server *s)
{
    return s->port;
}


int
relay_http_connections(const relay_http_server *s)
{
    return s->nconns;
}


void
relay_http_close(relay_http_server *s)
{
    if (s == NULL) {
        return;
    }
    while (s->conns != NULL) {
        conn_close(s->conns);
    }
    ev_io_stop(s->loop, &s->accept_io);
    ev_timer_stop(s->loop, &s->accept_pause);
    close(s->fd);
    free(s);
}
