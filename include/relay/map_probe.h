/*
 * map_probe: whether this host reads a file faster through a mapping of it
 * or through pread(2), found by timing both over a few pieces of the file.
 *
 * Why a measurement and not a rule: which is faster depends on the host, not
 * the file. Through a mapping nothing is copied, but the first touch of each
 * page sets a page-table entry; with hardware-assisted paging that is cheap
 * (finding the newlines of a 190 MB file: 20 ms mapped vs 27 ms read on a KVM
 * guest), on a paravirtualised host each one traps (~100 vs ~30 ms). The
 * answer only changes speed: both ways hand over the same lines.
 */
#ifndef RELAY_MAP_PROBE_H
#define RELAY_MAP_PROBE_H

#include <stddef.h>
#include <sys/types.h>

/* Below this size the probe's own cost is not worth it: such files are read. */
#define RELAY_MAP_PROBE_MIN ((off_t)8 << 20)

/* 1 when reading `map` (fd's bytes [0, size) mapped) is no slower than about
 * 1.5 times reading fd with pread, else 0 (also for files under
 * RELAY_MAP_PROBE_MIN, and when a read fails). Touches the mapping's first
 * 2 MiB: a caller that fears the file shrinking guards it (map_guard.h). */
int relay_map_probe(int fd, const char *map, off_t size);

#endif
