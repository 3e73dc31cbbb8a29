/*
 * TLS for blocking hiredis contexts (relay/redis_tls.h): hiredis formats
 * and parses, OpenSSL moves the bytes. The socket keeps hiredis's
 * SO_RCVTIMEO/SO_SNDTIMEO, so an expired timeout surfaces as a TLS
 * WANT_READ/WANT_WRITE and is reported as a timeout.
 */
#include <stdio.h>
#include <string.h>

#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "relay/redis_tls.h"

#define READ_CHUNK 16384


static void
set_context_error(redisContext *c, int type, const char *text)
{
    c->err = type;
    snprintf(c->errstr, sizeof(c->errstr), "%s", text);
}


/* The full description goes to err: hiredis's errstr holds 128 bytes,
 * too few for a description and its fix. */
static void
set_ssl_error(redisContext *c, SSL *ssl, int ret, char *err, size_t errlen)
{
    relay_tls_describe_failure(ssl, ret, err, errlen);
    set_context_error(c, REDIS_ERR_IO, err);
}


SSL *
relay_redis_tls_start_blocking(redisContext *c, const relay_tls *tls, const char *host, char *err, size_t errlen)
{
    SSL *ssl = relay_tls_session(tls, host, c->fd, err, errlen);
    int ret;

    if (ssl == NULL) {
        return NULL;
    }
    ERR_clear_error();
    ret = SSL_connect(ssl);
    if (ret != 1) {
        relay_tls_describe_failure(ssl, ret, err, errlen);
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}


/* Sends what hiredis formatted into its output buffer. */
static int
flush_output(redisContext *c, SSL *ssl, char *err, size_t errlen)
{
    size_t off = 0, len = sdslen(c->obuf);

    while (off < len) {
        int ret;
        ERR_clear_error();
        ret = SSL_write(ssl, c->obuf + off, (int)(len - off));
        if (ret <= 0) {
            set_ssl_error(c, ssl, ret, err, errlen);
            return REDIS_ERR;
        }
        off += (size_t)ret;
    }
    sdsfree(c->obuf);
    c->obuf = sdsempty();
    if (c->obuf == NULL) {
        set_context_error(c, REDIS_ERR_OOM, "out of memory");
        snprintf(err, errlen, "out of memory");
        return REDIS_ERR;
    }
    return REDIS_OK;
}


/* Feeds decrypted bytes to hiredis's reader until it has a whole reply. */
static redisReply *
read_reply(redisContext *c, SSL *ssl, char *err, size_t errlen)
{
    char buf[READ_CHUNK];
    void *reply = NULL;

    for (;;) {
        int ret;
        if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
            set_context_error(c, REDIS_ERR_PROTOCOL, c->reader->errstr);
            snprintf(err, errlen, "%s", c->errstr);
            return NULL;
        }
        if (reply != NULL) {
            return reply;
        }
        ERR_clear_error();
        ret = SSL_read(ssl, buf, (int)sizeof(buf));
        if (ret <= 0) {
            set_ssl_error(c, ssl, ret, err, errlen);
            return NULL;
        }
        if (redisReaderFeed(c->reader, buf, (size_t)ret) != REDIS_OK) {
            set_context_error(c, REDIS_ERR_PROTOCOL, c->reader->errstr);
            snprintf(err, errlen, "%s", c->errstr);
            return NULL;
        }
    }
}


redisReply *
relay_redis_tls_command_blocking(redisContext *c, SSL *ssl, int argc, const char **argv, const size_t *argvlen,
                                 char *err, size_t errlen)
{
    if (c->err) {
        return NULL;
    }
    if (redisAppendCommandArgv(c, argc, argv, argvlen) != REDIS_OK) {
        snprintf(err, errlen, "%s", c->errstr);
        return NULL;
    }
    if (flush_output(c, ssl, err, errlen) != REDIS_OK) {
        return NULL;
    }
    return read_reply(c, ssl, err, errlen);
}
