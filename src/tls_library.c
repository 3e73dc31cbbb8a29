/*
 * OpenSSL, loaded on first use (include/relay/tls_library.h).
 *
 * Only rediss:// needs it, yet linked into the binary libssl and libcrypto
 * made every process start pay their relocations and page faults: ~2 ms
 * of CPU per `relay` command here, a tenth of what `relay app invoke` adds
 * to the container it runs. The binary is linked without them; each
 * OpenSSL function Relay calls is defined here with the header's own
 * prototype (a mismatch does not compile) and forwards to the library's,
 * looked up once. relay_tls_new loads the library first, so a missing one
 * is a TLS error of the connection, not a crash.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <openssl/err.h>
#include <openssl/opensslv.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include "relay/tls_library.h"

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
/* libssl.so.3: its soname, whose dependencies bring libcrypto along */
#define LIBSSL_SONAME "libssl.so." STRINGIFY(OPENSSL_SHLIB_VERSION)

static void *library;


int
relay_tls_library_load(char *err, size_t errlen)
{
    void *h = __atomic_load_n(&library, __ATOMIC_ACQUIRE);

    if (h != NULL) {
        return 0;
    }
    /* dlopen of a loaded library returns the same handle: a race loads once */
    h = dlopen(LIBSSL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(err, errlen, "cannot load OpenSSL: %s", dlerror());
        return -1;
    }
    __atomic_store_n(&library, h, __ATOMIC_RELEASE);
    return 0;
}


/* Every caller got an SSL object or context from relay_tls_new, which
 * loaded the library: failing here is a bug, not a missing library. */
static void *
library_symbol(const char *name)
{
    char err[256];
    void *sym;

    if (relay_tls_library_load(err, sizeof err) != 0) {
        fprintf(stderr, "relay: %s\n", err);
        abort();
    }
    sym = dlsym(__atomic_load_n(&library, __ATOMIC_ACQUIRE), name);
    if (sym == NULL) {
        fprintf(stderr, "relay: OpenSSL has no %s\n", name);
        abort();
    }
    return sym;
}


/* f: the library's function `name` (of type ret (*) params), looked up on
 * its first call. */
#define RESOLVE(ret, name, params)                           \
    static ret(*fn) params;                                  \
    ret(*f) params = __atomic_load_n(&fn, __ATOMIC_ACQUIRE); \
    if (f == NULL) {                                         \
        *(void **)&f = library_symbol(#name);                \
        __atomic_store_n(&fn, f, __ATOMIC_RELEASE);          \
    }

/* name's definition: the library's function, called with args. */
#define FORWARD(ret, name, params, args) \
    ret name params                      \
    {                                    \
        RESOLVE(ret, name, params)       \
        return f args;                   \
    }

#define FORWARD_VOID(name, params, args) \
    void name params                     \
    {                                    \
        RESOLVE(void, name, params)      \
        f args;                          \
    }

typedef int (*client_cert_fn)(SSL *ssl, X509 **x509, EVP_PKEY **pkey);

/* libcrypto */
FORWARD_VOID(ERR_clear_error, (void), ())
FORWARD_VOID(ERR_error_string_n, (unsigned long e, char *buf, size_t len), (e, buf, len))
FORWARD(unsigned long, ERR_peek_last_error, (void), ())
FORWARD(const char *, ERR_reason_error_string, (unsigned long e), (e))
FORWARD(char *, X509_VERIFY_PARAM_get0_host, (X509_VERIFY_PARAM * param, int idx), (param, idx))
FORWARD(const char *, X509_verify_cert_error_string, (long n), (n))

/* libssl: contexts */
FORWARD(const SSL_METHOD *, TLS_client_method, (void), ())
FORWARD(SSL_CTX *, SSL_CTX_new, (const SSL_METHOD *meth), (meth))
FORWARD_VOID(SSL_CTX_free, (SSL_CTX * ctx), (ctx))
FORWARD(long, SSL_CTX_ctrl, (SSL_CTX * ctx, int cmd, long larg, void *parg), (ctx, cmd, larg, parg))
FORWARD_VOID(SSL_CTX_set_verify, (SSL_CTX * ctx, int mode, SSL_verify_cb callback), (ctx, mode, callback))
FORWARD_VOID(SSL_CTX_set_client_cert_cb, (SSL_CTX * ctx, client_cert_fn cb), (ctx, cb))
FORWARD(int, SSL_CTX_set_default_verify_paths, (SSL_CTX * ctx), (ctx))
FORWARD(int, SSL_CTX_load_verify_locations, (SSL_CTX * ctx, const char *file, const char *path), (ctx, file, path))
FORWARD(int, SSL_CTX_use_certificate_chain_file, (SSL_CTX * ctx, const char *file), (ctx, file))
FORWARD(int, SSL_CTX_use_PrivateKey_file, (SSL_CTX * ctx, const char *file, int type), (ctx, file, type))
FORWARD(int, SSL_CTX_check_private_key, (const SSL_CTX *ctx), (ctx))

/* libssl: connections */
FORWARD(SSL *, SSL_new, (SSL_CTX * ctx), (ctx))
FORWARD_VOID(SSL_free, (SSL * ssl), (ssl))
FORWARD(long, SSL_ctrl, (SSL * ssl, int cmd, long larg, void *parg), (ssl, cmd, larg, parg))
FORWARD(int, SSL_set_fd, (SSL * s, int fd), (s, fd))
FORWARD_VOID(SSL_set_connect_state, (SSL * s), (s))
FORWARD(int, SSL_set1_host, (SSL * s, const char *hostname), (s, hostname))
FORWARD(X509_VERIFY_PARAM *, SSL_get0_param, (SSL * ssl), (ssl))
FORWARD(const char *, SSL_get0_peername, (SSL * s), (s))
FORWARD(int, SSL_set_ex_data, (SSL * ssl, int idx, void *data), (ssl, idx, data))
FORWARD(void *, SSL_get_ex_data, (const SSL *ssl, int idx), (ssl, idx))
FORWARD(X509 *, SSL_get_certificate, (const SSL *ssl), (ssl))
FORWARD(int, SSL_connect, (SSL * ssl), (ssl))
FORWARD(int, SSL_read, (SSL * ssl, void *buf, int num), (ssl, buf, num))
FORWARD(int, SSL_write, (SSL * ssl, const void *buf, int num), (ssl, buf, num))
FORWARD(int, SSL_pending, (const SSL *s), (s))
FORWARD(int, SSL_has_pending, (const SSL *s), (s))
FORWARD(int, SSL_get_error, (const SSL *s, int ret_code), (s, ret_code))
FORWARD(long, SSL_get_verify_result, (const SSL *ssl), (ssl))
