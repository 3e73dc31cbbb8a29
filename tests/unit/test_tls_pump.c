/*
 * The TLS pump against an in-process TLS echo server on a socketpair:
 * a megabyte each way through small buffers (back-pressure on both sides),
 * and the failures an operator must be told about, each naming its fix.
 * The certificate is made here, in memory, and written to a temp file as
 * the trust store.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "check.h"
#include "relay/tls.h"
#include "relay/tls_pump.h"

#define PAYLOAD (1024 * 1024)
#define GIVE_UP_S 30.0 /* a hang fails the test instead of blocking ctest */

typedef struct {
    EVP_PKEY *key;
    X509 *cert;
    char path[64]; /* the certificate as a PEM file: the client's CA */
} identity;

/* The echo server: SSL_accept, then every byte read is written back. */
typedef struct {
    SSL *ssl;
    ev_io io;
    char buf[4096];
    size_t len, off;
    int close_after_handshake;
} echo_server;

/* The hiredis side of the pump: writes the payload, reads the echo. */
typedef struct {
    int fd;
    ev_io out, in;
    unsigned char *sent, *got;
    size_t written, read;
} plain_side;

typedef struct {
    struct ev_loop *loop;
    relay_tls_pump *pump;
    char error[512];
    int failed;
} outcome;


static identity
make_identity(const char *name)
{
    identity id = {0};
    X509V3_CTX ctx;
    X509_EXTENSION *san;
    char san_text[128];
    FILE *f;
    int fd;

    id.key = EVP_EC_gen("P-256");
    id.cert = X509_new();
    X509_set_version(id.cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(id.cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(id.cert), -60);
    X509_gmtime_adj(X509_getm_notAfter(id.cert), 3600);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(id.cert), "CN", MBSTRING_ASC, (const unsigned char *)name, -1, -1,
                               0);
    X509_set_issuer_name(id.cert, X509_get_subject_name(id.cert));
    X509_set_pubkey(id.cert, id.key);
    X509V3_set_ctx(&ctx, id.cert, id.cert, NULL, NULL, 0);
    snprintf(san_text, sizeof(san_text), "DNS:%s", name);
    san = X509V3_EXT_conf_nid(NULL, &ctx, NID_subject_alt_name, san_text);
    X509_add_ext(id.cert, san, -1);
    X509_EXTENSION_free(san);
    X509_sign(id.cert, id.key, EVP_sha256());
    snprintf(id.path, sizeof(id.path), "/tmp/relay-pump-ca-XXXXXX");
    fd = mkstemp(id.path);
    f = fdopen(fd, "w");
    PEM_write_X509(f, id.cert);
    fclose(f);
    return id;
}


static void
free_identity(identity *id)
{
    unlink(id->path);
    X509_free(id->cert);
    EVP_PKEY_free(id->key);
}


static void
server_watch(struct ev_loop *loop, echo_server *s, int events)
{
    ev_io_stop(loop, &s->io);
    ev_io_set(&s->io, s->io.fd, events);
    ev_io_start(loop, &s->io);
}


static int
server_wants(echo_server *s, int ret)
{
    switch (SSL_get_error(s->ssl, ret)) {
    case SSL_ERROR_WANT_READ:
        return EV_READ;
    case SSL_ERROR_WANT_WRITE:
        return EV_WRITE;
    default:
        return 0; /* the client went away: stop serving */
    }
}


/* One step of the server: what it waits for next (0: stop serving), or
 * -1 when it made progress and should go on at once (OpenSSL may hold
 * decrypted bytes that no socket readiness would announce). */
static int
server_step(echo_server *s, int fd)
{
    int ret;

    ERR_clear_error();
    if (!SSL_is_init_finished(s->ssl)) {
        ret = SSL_accept(s->ssl);
        if (ret != 1) {
            return server_wants(s, ret);
        }
        if (s->close_after_handshake) {
            shutdown(fd, SHUT_RDWR);
            return 0;
        }
        return -1;
    }
    if (s->off < s->len) {
        ret = SSL_write(s->ssl, s->buf + s->off, (int)(s->len - s->off));
        if (ret <= 0) {
            return server_wants(s, ret);
        }
        s->off += (size_t)ret;
        return -1;
    }
    ret = SSL_read(s->ssl, s->buf, (int)sizeof(s->buf));
    if (ret <= 0) {
        return server_wants(s, ret);
    }
    s->len = (size_t)ret;
    s->off = 0;
    return -1;
}


static void
server_ready(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    echo_server *s = w->data;
    int events;

    while ((events = server_step(s, w->fd)) < 0) {
    }
    if (events == 0) {
        ev_io_stop(loop, w);
    } else {
        server_watch(loop, s, events);
    }
}


static void
plain_write(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    plain_side *p = w->data;
    ssize_t n = send(p->fd, p->sent + p->written, PAYLOAD - p->written, MSG_NOSIGNAL);

    if (n > 0) {
        p->written += (size_t)n;
    }
    if (p->written == PAYLOAD || (n < 0 && errno != EAGAIN)) {
        ev_io_stop(loop, w);
    }
}


static void
plain_read(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    plain_side *p = w->data;
    ssize_t n = recv(p->fd, p->got + p->read, PAYLOAD - p->read, 0);

    if (n > 0) {
        p->read += (size_t)n;
    }
    if (p->read == PAYLOAD || n == 0 || (n < 0 && errno != EAGAIN)) {
        ev_break(loop, EVBREAK_ALL);
    }
}


static void
pump_failed(void *ud, const char *error)
{
    outcome *o = ud;

    o->failed = 1;
    snprintf(o->error, sizeof(o->error), "%s", error);
    ev_break(o->loop, EVBREAK_ALL);
}


static void
gave_up(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}


static SSL_CTX *
server_context(const identity *id)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

    SSL_CTX_use_certificate(ctx, id->cert);
    SSL_CTX_use_PrivateKey(ctx, id->key);
    return ctx;
}


/* Runs one session: a pump trusting ca and expecting servername (NULL:
 * the host name "pump.test") against a server with identity server_id. */
static void
run_session(const identity *server_id, const char *ca, const char *servername, int close_after_handshake,
            plain_side *plain, outcome *out)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    relay_tls_options opts = {.ca = ca, .servername = servername};
    char err[512];
    relay_tls *tls = relay_tls_new(&opts, err, sizeof(err));
    SSL_CTX *server_ctx = server_context(server_id);
    echo_server server = {.close_after_handshake = close_after_handshake};
    int net[2], pipe_ends[2];
    ev_timer guard;
    SSL *ssl;

    CHECK(tls != NULL);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, net) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pipe_ends) == 0);
    server.ssl = SSL_new(server_ctx);
    SSL_set_fd(server.ssl, net[1]);
    SSL_set_accept_state(server.ssl);
    ev_io_init(&server.io, server_ready, net[1], EV_READ);
    server.io.data = &server;
    ev_io_start(loop, &server.io);

    ssl = relay_tls_session(tls, "pump.test", net[0], err, sizeof(err));
    out->loop = loop;
    out->pump = relay_tls_pump_new(loop, ssl, net[0], pipe_ends[0], pump_failed, out);
    plain->fd = pipe_ends[1];
    ev_io_init(&plain->out, plain_write, plain->fd, EV_WRITE);
    ev_io_init(&plain->in, plain_read, plain->fd, EV_READ);
    plain->out.data = plain->in.data = plain;
    ev_io_start(loop, &plain->out);
    ev_io_start(loop, &plain->in);
    ev_timer_init(&guard, gave_up, GIVE_UP_S, 0.);
    ev_timer_start(loop, &guard);

    ev_run(loop, 0);

    relay_tls_pump_free(out->pump); /* closes net[0] and pipe_ends[0] */
    close(plain->fd);
    SSL_free(server.ssl);
    close(net[1]);
    SSL_CTX_free(server_ctx);
    relay_tls_free(tls);
    ev_loop_destroy(loop);
}


static void
new_plain(plain_side *p)
{
    memset(p, 0, sizeof(*p));
    p->sent = malloc(PAYLOAD);
    p->got = calloc(1, PAYLOAD);
    for (size_t i = 0; i < PAYLOAD; i++) {
        p->sent[i] = (unsigned char)(i * 7 + i / 251);
    }
}


static void
free_plain(plain_side *p)
{
    free(p->sent);
    free(p->got);
}


static void
test_echoes_a_megabyte(const identity *server_id)
{
    plain_side plain;
    outcome out = {0};

    new_plain(&plain);
    run_session(server_id, server_id->path, NULL, 0, &plain, &out);
    CHECK(!out.failed);
    CHECK(plain.written == PAYLOAD);
    CHECK(plain.read == PAYLOAD);
    CHECK(memcmp(plain.sent, plain.got, PAYLOAD) == 0);
    free_plain(&plain);
}


static void
expect_failure(const identity *server_id, const char *ca, const char *servername, int close_after_handshake,
               const char *wanted)
{
    plain_side plain;
    outcome out = {0};

    new_plain(&plain);
    run_session(server_id, ca, servername, close_after_handshake, &plain, &out);
    CHECK(out.failed);
    if (strstr(out.error, wanted) == NULL) {
        fprintf(stderr, "error \"%s\" does not mention \"%s\"\n", out.error, wanted);
        CHECK(0);
    }
    free_plain(&plain);
}


static void
test_bad_files_name_their_variable(void)
{
    char err[512];
    relay_tls_options missing_ca = {.ca = "/nonexistent/ca.pem"};
    relay_tls_options cert_only = {.cert = "/nonexistent/cert.pem"};

    CHECK(relay_tls_new(&missing_ca, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "RELAY_REDIS_CA=/nonexistent/ca.pem") != NULL);
    CHECK(relay_tls_new(&cert_only, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "RELAY_REDIS_KEY") != NULL);
}


int
main(void)
{
    identity server_id = make_identity("pump.test");
    identity stranger = make_identity("stranger.test");

    signal(SIGPIPE, SIG_IGN); /* as relay's main does: a closed peer is an error return */

    test_echoes_a_megabyte(&server_id);
    expect_failure(&server_id, stranger.path, NULL, 0, "RELAY_REDIS_CA");
    expect_failure(&server_id, server_id.path, "other.test", 0, "RELAY_REDIS_TLS_SERVERNAME");
    expect_failure(&server_id, server_id.path, NULL, 1, "closed");
    test_bad_files_name_their_variable();
    free_identity(&server_id);
    free_identity(&stranger);
    CHECK_DONE();
}
