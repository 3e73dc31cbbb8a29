/*
 * TLS client settings for Redis connections (rediss://), on OpenSSL.
 *
 * A relay_tls holds what every connection to one server shares: the trust
 * store, the optional client certificate and the name the server's
 * certificate must carry. Sessions made from it verify the server by
 * default; there is no switch to turn that off.
 *
 * Failures are described for an operator: each message names the variable
 * that fixes it (RELAY_REDIS_CA, RELAY_REDIS_CERT/RELAY_REDIS_KEY,
 * RELAY_REDIS_TLS_SERVERNAME), because that is what they can change.
 */
#ifndef RELAY_TLS_H
#define RELAY_TLS_H

#include <stddef.h>

struct ssl_st; /* OpenSSL's SSL: callers need no OpenSSL header */

typedef struct {
    const char *ca;         /* CA file or directory; NULL: the system store */
    const char *cert;       /* client certificate (chain) file, or NULL */
    const char *key;        /* its private key file; required with cert */
    const char *servername; /* name checked and sent as SNI; NULL: the host */
} relay_tls_options;

typedef struct relay_tls relay_tls;

/* Loads the trust store and the client certificate. NULL with err filled
 * (naming the variable) when a file cannot be used. */
relay_tls *relay_tls_new(const relay_tls_options *opts, char *err, size_t errlen);

void relay_tls_free(relay_tls *tls);

/* A client session over fd for a connection to host: SNI and the
 * certificate's name check are set (servername wins over host). The
 * caller frees it with SSL_free; fd stays the caller's. */
struct ssl_st *relay_tls_session(const relay_tls *tls, const char *host, int fd, char *err, size_t errlen);

/* The name the server's certificate must carry for a connection to host. */
const char *relay_tls_expected_name(const relay_tls *tls, const char *host);

/* Describes why an SSL call on ssl returned ret (SSL_get_error applied),
 * with what to set to fix it. Clears OpenSSL's error queue. */
void relay_tls_describe_failure(struct ssl_st *ssl, int ret, char *out, size_t cap);

#endif
