/*
 * TLS client settings and failure descriptions (include/relay/tls.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "relay/tls.h"
#include "relay/tls_library.h"

struct relay_tls {
    SSL_CTX *ctx;
    char *servername; /* NULL: the host connected to */
    int has_client_cert;
};


/* OpenSSL's most recent error as text ("" when the queue is empty), then
 * an empty queue: a stale entry must not explain a later failure. */
static void
last_openssl_error(char *out, size_t cap)
{
    unsigned long code = ERR_peek_last_error();

    out[0] = '\0';
    if (code != 0) {
        const char *reason = ERR_reason_error_string(code);
        if (reason != NULL) {
            snprintf(out, cap, "%s", reason);
        } else {
            ERR_error_string_n(code, out, cap);
        }
    }
    ERR_clear_error();
}


static int
load_trust(SSL_CTX *ctx, const char *ca, char *err, size_t errlen)
{
    struct stat st;
    char why[256];
    int ok;

    if (ca == NULL) {
        if (SSL_CTX_set_default_verify_paths(ctx) == 1) {
            return 0;
        }
        last_openssl_error(why, sizeof(why));
        snprintf(err, errlen, "cannot load the system CA store (%s); set RELAY_REDIS_CA", why);
        return -1;
    }
    if (stat(ca, &st) != 0) {
        snprintf(err, errlen, "RELAY_REDIS_CA=%s: %s", ca, strerror(errno));
        return -1;
    }
    ok = S_ISDIR(st.st_mode) ? SSL_CTX_load_verify_locations(ctx, NULL, ca)
                             : SSL_CTX_load_verify_locations(ctx, ca, NULL);
    if (ok != 1) {
        last_openssl_error(why, sizeof(why));
        snprintf(err, errlen, "RELAY_REDIS_CA=%s: not a PEM CA certificate file or directory (%s)", ca, why);
        return -1;
    }
    return 0;
}


static int
load_client_cert(SSL_CTX *ctx, const char *cert, const char *key, char *err, size_t errlen)
{
    char why[256];

    if (cert == NULL && key == NULL) {
        return 0;
    }
    if (cert == NULL || key == NULL) {
        snprintf(err, errlen, "a client certificate needs both RELAY_REDIS_CERT and RELAY_REDIS_KEY (%s is unset)",
                 cert == NULL ? "RELAY_REDIS_CERT" : "RELAY_REDIS_KEY");
        return -1;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        last_openssl_error(why, sizeof(why));
        snprintf(err, errlen, "RELAY_REDIS_CERT=%s: cannot load the certificate (%s)", cert, why);
        return -1;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        last_openssl_error(why, sizeof(why));
        snprintf(err, errlen, "RELAY_REDIS_KEY=%s: cannot load the private key (%s)", key, why);
        return -1;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        last_openssl_error(why, sizeof(why));
        snprintf(err, errlen, "RELAY_REDIS_KEY=%s does not belong to RELAY_REDIS_CERT=%s (%s)", key, cert, why);
        return -1;
    }
    return 0;
}


/* Called by OpenSSL when the server asks for a client certificate and none
 * is configured: noted, because under TLS 1.3 the server's refusal comes
 * after the client's handshake is done, often as a bare reset, and the
 * note is then all that explains it. */
static int
note_certificate_request(SSL *ssl, X509 **cert, EVP_PKEY **key)
{
    (void)cert;
    (void)key;
    SSL_set_app_data(ssl, ssl);
    return 0; /* send none */
}


relay_tls *
relay_tls_new(const relay_tls_options *opts, char *err, size_t errlen)
{
    relay_tls *tls;

    if (relay_tls_library_load(err, errlen) != 0) {
        return NULL;
    }
    tls = calloc(1, sizeof(*tls));
    if (tls == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    tls->ctx = SSL_CTX_new(TLS_client_method());
    if (tls->ctx == NULL) {
        snprintf(err, errlen, "cannot create a TLS context");
        relay_tls_free(tls);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(tls->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(tls->ctx, SSL_VERIFY_PEER, NULL);
    /* The pump retries a write with whatever is left of its buffer. */
    SSL_CTX_set_mode(tls->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* No read-ahead (OpenSSL's default, said here because it matters): every
     * byte OpenSSL has not read stays in the kernel, where epoll announces
     * it; bytes read ahead into OpenSSL's buffer would be announced by
     * nothing, and the pump waits for epoll. A record costs two read()s. */
    SSL_CTX_set_read_ahead(tls->ctx, 0);
    if (load_trust(tls->ctx, opts->ca, err, errlen) != 0
        || load_client_cert(tls->ctx, opts->cert, opts->key, err, errlen) != 0) {
        relay_tls_free(tls);
        return NULL;
    }
    tls->has_client_cert = opts->cert != NULL;
    if (!tls->has_client_cert) {
        SSL_CTX_set_client_cert_cb(tls->ctx, note_certificate_request);
    }
    if (opts->servername != NULL && (tls->servername = strdup(opts->servername)) == NULL) {
        snprintf(err, errlen, "out of memory");
        relay_tls_free(tls);
        return NULL;
    }
    return tls;
}


void
relay_tls_free(relay_tls *tls)
{
    if (tls == NULL) {
        return;
    }
    SSL_CTX_free(tls->ctx);
    free(tls->servername);
    free(tls);
}


const char *
relay_tls_expected_name(const relay_tls *tls, const char *host)
{
    return tls->servername != NULL ? tls->servername : host;
}


static int
is_ip_literal(const char *name)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}


SSL *
relay_tls_session(const relay_tls *tls, const char *host, int fd, char *err, size_t errlen)
{
    const char *name = relay_tls_expected_name(tls, host);
    SSL *ssl = SSL_new(tls->ctx);

    if (ssl == NULL) {
        snprintf(err, errlen, "cannot create a TLS session");
        return NULL;
    }
    /* SSL_set1_host checks an IP literal as an address (OpenSSL 3); SNI
     * carries host names only (RFC 6066). */
    if (SSL_set_fd(ssl, fd) != 1 || SSL_set1_host(ssl, name) != 1
        || (!is_ip_literal(name) && SSL_set_tlsext_host_name(ssl, name) != 1)) {
        snprintf(err, errlen, "cannot set up a TLS session for %s", name);
        ERR_clear_error();
        SSL_free(ssl);
        return NULL;
    }
    SSL_set_connect_state(ssl);
    return ssl;
}


/* The server did not accept the certificate chain it was verified against. */
static void
describe_verify_failure(SSL *ssl, long result, char *out, size_t cap)
{
    if (result == X509_V_ERR_HOSTNAME_MISMATCH || result == X509_V_ERR_IP_ADDRESS_MISMATCH) {
        const char *name = SSL_get0_peername(ssl);
        X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
        const char *wanted = X509_VERIFY_PARAM_get0_host(param, 0);
        snprintf(out, cap,
                 "TLS: the server's certificate does not name %s (%s); connect by a name it carries or set "
                 "RELAY_REDIS_TLS_SERVERNAME to one",
                 wanted ? wanted : (name ? name : "the host"), X509_verify_cert_error_string(result));
        return;
    }
    snprintf(out, cap,
             "TLS: the server's certificate is not trusted (%s); set RELAY_REDIS_CA to the CA certificate that "
             "signed it",
             X509_verify_cert_error_string(result));
}


/* What the server's alert or OpenSSL's reason says, with the fix. */
static void
describe_protocol_failure(SSL *ssl, char *out, size_t cap)
{
    unsigned long code = ERR_peek_last_error();
    int reason = ERR_GET_REASON(code);
    char why[256];

    last_openssl_error(why, sizeof(why));
    if (why[0] == '\0') {
        snprintf(why, sizeof(why), "handshake failed");
    }
    switch (reason) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
        if (SSL_get_certificate(ssl) == NULL) {
            snprintf(out, cap,
                     "TLS: %s; the server wants a client certificate: set RELAY_REDIS_CERT and RELAY_REDIS_KEY", why);
        } else {
            snprintf(out, cap, "TLS: %s; the server refused the client certificate in RELAY_REDIS_CERT", why);
        }
        return;
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
        snprintf(out, cap, "TLS: the server closed the connection");
        return;
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
        snprintf(out, cap, "TLS: %s; the server does not speak TLS on this port (use redis:// for a plain one)", why);
        return;
    default:
        snprintf(out, cap, "TLS: %s", why);
    }
}


/* The socket under the session failed; the errno of the failed call. */
static void
describe_socket_failure(int ret, int error, char *out, size_t cap)
{
    if (ret == 0 || error == 0 || error == EPIPE || error == ECONNRESET) {
        snprintf(out, cap, "TLS: the server closed the connection%s%s%s", error ? " (" : "",
                 error ? strerror(error) : "", error ? ")" : "");
    } else {
        snprintf(out, cap, "TLS: %s", strerror(error));
    }
    ERR_clear_error();
}


static void
add_client_certificate_hint(SSL *ssl, char *out, size_t cap)
{
    size_t len = strlen(out);

    if (SSL_get_app_data(ssl) != NULL && strstr(out, "RELAY_REDIS_CERT") == NULL && len < cap) {
        snprintf(out + len, cap - len,
                 "; the server asked for a client certificate: set RELAY_REDIS_CERT and "
                 "RELAY_REDIS_KEY");
    }
}


void
relay_tls_describe_failure(SSL *ssl, int ret, char *out, size_t cap)
{
    int kind = SSL_get_error(ssl, ret);
    long verify = SSL_get_verify_result(ssl);

    if (kind == SSL_ERROR_SSL && verify != X509_V_OK) {
        ERR_clear_error();
        describe_verify_failure(ssl, verify, out, cap);
    } else if (kind == SSL_ERROR_SSL) {
        describe_protocol_failure(ssl, out, cap);
    } else if (kind == SSL_ERROR_ZERO_RETURN) {
        snprintf(out, cap, "TLS: the server closed the connection");
    } else if (kind == SSL_ERROR_SYSCALL && ERR_peek_last_error() == 0) {
        describe_socket_failure(ret, errno, out, cap);
    } else if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) {
        snprintf(out, cap, "TLS: timed out");
    } else {
        char why[256];
        last_openssl_error(why, sizeof(why));
        snprintf(out, cap, "TLS: %s", why[0] ? why : "failed");
    }
    if (kind != SSL_ERROR_WANT_READ && kind != SSL_ERROR_WANT_WRITE) {
        add_client_certificate_hint(ssl, out, cap);
    }
}
