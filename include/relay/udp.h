/*
 * Fire-and-forget UDP for hooks (StatsD and the like, docs/hooks.md):
 * a connected, non-blocking datagram socket whose send never waits. A
 * datagram the kernel cannot take right now is dropped and counted.
 */
#ifndef RELAY_UDP_H
#define RELAY_UDP_H

#include <stddef.h>
#include <stdint.h>

typedef struct relay_udp relay_udp;

/* Opens a socket aimed at host:port. With allow_names == 0 host must be a
 * numeric address (name lookups block); "localhost" is always accepted.
 * Returns NULL and fills err on failure. */
relay_udp *relay_udp_open(const char *host, int port, int allow_names, char *err, size_t err_cap);

/* Sends one datagram. Returns 1 if the kernel took it, 0 if it was dropped
 * (would block, no buffer, peer refused, too large); never blocks. */
int relay_udp_send(relay_udp *u, const void *data, size_t len);

void relay_udp_counts(const relay_udp *u, uint64_t *sent, uint64_t *dropped);

void relay_udp_close(relay_udp *u);

#endif
