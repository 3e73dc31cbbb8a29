/* The metrics responder over real sockets on 127.0.0.1: answers, strictness
 * (400, 405, 431, 505), the per-connection deadline, the connection limit,
 * and a loop that keeps serving after every kind of bad client. */
#include "relay/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static struct ev_loop *loop;
static relay_http_server *srv;
static char last_path[256];
static int handled;


static void
handler(void *ud, const char *method, const char *path, relay_http_response *resp)
{
    (void)ud;
    (void)method;
    handled++;
    snprintf(last_path, sizeof(last_path), "%s", path);
    if (strcmp(path, "/metrics") == 0) {
        resp->status = 200;
        resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
        resp->body = "relay_up 1\n";
        resp->body_len = strlen(resp->body);
    } else if (strcmp(path, "/broken") == 0) {
        resp->status = 0; /* a handler that failed */
    } else {
        resp->status = 404;
        resp->body = "not found\n";
        resp->body_len = strlen(resp->body);
    }
}


static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


static int
connect_client(void)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)relay_http_port(srv));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("connect");
        exit(1);
    }
    return fd;
}


/* Runs the loop until the server closed fd's connection (EOF) or seconds
 * passed; returns what was received (NUL-terminated, static). */
static const char *
collect(int fd, double seconds)
{
    static char buf[65536];
    size_t len = 0;
    double deadline = now_s() + seconds;

    while (now_s() < deadline) {
        ssize_t n;
        ev_run(loop, EVRUN_NOWAIT);
        n = recv(fd, buf + len, sizeof(buf) - 1 - len, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            break;
        }
        if (n > 0) {
            len += (size_t)n;
        } else {
            usleep(1000);
        }
    }
    buf[len] = '\0';
    return buf;
}


static const char *
exchange(const char *request, size_t len)
{
    int fd = connect_client();
    const char *reply;

    CHECK(send(fd, request, len, 0) == (ssize_t)len);
    reply = collect(fd, 3.0);
    close(fd);
    return reply;
}


#define EXCHANGE(s) exchange((s), sizeof(s) - 1)

static int
starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}


static void
settle(void)
{
    double deadline = now_s() + 3.0;

    while (relay_http_connections(srv) > 0 && now_s() < deadline) {
        ev_run(loop, EVRUN_NOWAIT);
        usleep(1000);
    }
}


static void
test_answers(void)
{
    const char *r = EXCHANGE("GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\n");

    CHECK(starts_with(r, "HTTP/1.1 200 OK\r\n"));
    CHECK(strstr(r, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != NULL);
    CHECK(strstr(r, "Content-Length: 11\r\n") != NULL);
    CHECK(strstr(r, "Connection: close\r\n") != NULL);
    CHECK(strstr(r, "\r\n\r\nrelay_up 1\n") != NULL);

    r = EXCHANGE("GET /metrics?name=x HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(starts_with(r, "HTTP/1.1 200 OK\r\n"));
    CHECK_STR(last_path, "/metrics");

    r = EXCHANGE("GET /nope HTTP/1.0\r\n\r\n"); /* 1.0 needs no Host */
    CHECK(starts_with(r, "HTTP/1.1 404 Not Found\r\n"));

    r = EXCHANGE("GET /broken HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(starts_with(r, "HTTP/1.1 500 Internal Server Error\r\n"));
}


static void
test_bad_requests(void)
{
    int before = handled;
    const char *r;

    r = EXCHANGE("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    CHECK(starts_with(r, "HTTP/1.1 405 Method Not Allowed\r\n"));
    CHECK(strstr(r, "Allow: GET\r\n") != NULL);
    CHECK(starts_with(EXCHANGE("HELLO\r\n\r\n"), "HTTP/1.1 400 "));
    CHECK(starts_with(EXCHANGE("GET metrics HTTP/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 400 "));
    CHECK(starts_with(EXCHANGE("GET /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 ")); /* no Host */
    CHECK(starts_with(EXCHANGE("GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), "HTTP/1.1 400 "));
    CHECK(starts_with(EXCHANGE("GET /metrics HTTP/1.1\nHost: x\n\n"), "HTTP/1.1 400 "));
    CHECK(starts_with(EXCHANGE("GET /metrics HTTP/1.1\r\nHost : x\r\n\r\n"), "HTTP/1.1 400 "));
    CHECK(starts_with(EXCHANGE("GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n"), "HTTP/1.1 400 "));
    CHECK(starts_with(EXCHANGE("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"), "HTTP/1.1 400 "));
    CHECK(starts_with(EXCHANGE("GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"),
                      "HTTP/1.1 400 "));
    CHECK(starts_with(EXCHANGE("GET /a b HTTP/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 400 "));
    CHECK(starts_with(EXCHANGE("GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n"), "HTTP/1.1 505 "));
    CHECK(starts_with(EXCHANGE("GET /metrics HTTQ/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 400 "));
    CHECK(handled == before); /* none of these reached the handler */
}


static void
test_bounded_request(void)
{
    char big[2048];
    const char *r;
    int n = snprintf(big, sizeof(big), "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ");

    memset(big + n, 'a', sizeof(big) - (size_t)n - 4);
    memcpy(big + sizeof(big) - 4, "\r\n\r\n", 4);
    r = exchange(big, sizeof(big)); /* the limit in main() is 512 bytes */
    CHECK(starts_with(r, "HTTP/1.1 431 "));
}


static void
test_timeout_and_limit(void)
{
    int a, b, c;
    double started;
    const char *r;

    settle(); /* earlier clients may still be lingering */
    a = connect_client();
    b = connect_client();
    started = now_s();

    CHECK(send(a, "GET /met", 8, 0) == 8); /* a slow client */
    ev_run(loop, EVRUN_NOWAIT);
    ev_run(loop, EVRUN_NOWAIT);
    c = connect_client();
    r = collect(c, 2.0);
    CHECK(starts_with(r, "HTTP/1.1 503 ")); /* max_connections = 2 */
    close(c);
    r = collect(a, 3.0);
    CHECK(r[0] == '\0'); /* closed by the deadline, without an answer */
    CHECK(now_s() - started < 2.0);
    close(a);
    close(b);
    settle();
    CHECK(relay_http_connections(srv) == 0);
}


int
main(void)
{
    relay_http_limits lim = {512, 0.3, 2};
    char err[256];
    relay_http_server *other;

    loop = ev_loop_new(EVFLAG_AUTO);
    srv = relay_http_listen(loop, "127.0.0.1", 0, &lim, handler, NULL, NULL, err, sizeof(err));
    CHECK(srv != NULL);
    if (srv == NULL) {
        fprintf(stderr, "%s\n", err);
        CHECK_DONE();
    }
    CHECK(relay_http_port(srv) > 0);
    other = relay_http_listen(loop, "127.0.0.1", relay_http_port(srv), &lim, handler, NULL, NULL, err, sizeof(err));
    CHECK(other == NULL);
    CHECK(strstr(err, "cannot listen on 127.0.0.1:") != NULL);

    test_answers();
    test_bad_requests();
    test_bounded_request();
    test_timeout_and_limit();
    /* The loop still serves after all of the above. */
    CHECK(starts_with(EXCHANGE("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 200 OK\r\n"));
    settle();
    CHECK(relay_http_connections(srv) == 0);
    relay_http_close(srv);
    ev_loop_destroy(loop);
    CHECK_DONE();
}
