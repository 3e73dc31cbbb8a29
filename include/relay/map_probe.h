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

#include "relay/line_reader.h"

#include <stddef.h>
#include <sys/types.h>

/* Below this size the probe's own cost is not worth it: such files are read. */
#define RELAY_MAP_PROBE_MIN ((off_t)8 << 20)

/* The scratch buffer relay_map_probe reads into: the reads it times are the
 * line reader's. */
#define RELAY_MAP_PROBE_BUF RELAY_LINE_READER_PIECE

/* 1 when reading `map` (fd's bytes [0, size) mapped) from `from` on is no
 * slower than about 1.5 times reading fd with pread, else 0: also when fewer
 * than RELAY_MAP_PROBE_MIN bytes follow `from`, when a read fails, and when
 * the sampled bytes are not all in the page cache (then both ways would time
 * the disk). Reads into `buf` (RELAY_MAP_PROBE_BUF bytes). Touches the 2 MiB
 * of the mapping from `from` (a multiple of the page size): a caller that
 * fears the file shrinking guards it (map_guard.h). */
int relay_map_probe(int fd, const char *map, off_t from, off_t size, char *buf);

#endif
