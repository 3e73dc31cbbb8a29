/*
 * OpenSSL as a library loaded on first use (src/tls_library.c): the binary
 * does not link it, so commands that never open a TLS connection do not
 * pay for loading it.
 */
#ifndef RELAY_TLS_LIBRARY_H
#define RELAY_TLS_LIBRARY_H

#include <stddef.h>

/* Loads libssl (and libcrypto) once; 0, or -1 with the reason in err. */
int relay_tls_library_load(char *err, size_t errlen);

#endif
