/*
 * map_probe: whether this host reads a file faster through a mapping of it
 * or through pread(2), found by timing both over a few pieces of the file.
 *
 * Why a measurement and not a rule: which is faster depends on the host, not
 * the file. Through a mapping nothing is copied, but the first touch of each
 * page sets a page-table entry and unmapping clears them all again, serially
 * at the end; through pread every byte is copied into a buffer the scanner
 * then reads from the cache. Setting a 190 MB file's entries and clearing
 * them cost 20 ms against a 27 ms read on one KVM guest, 36 ms against 14 ms
 * on a Firecracker guest, ~100 ms against ~30 ms on a paravirtualised host
 * where each first touch traps. The answer only changes speed: both ways
 * hand over the same lines.
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

/* 1 when reaching the bytes of `map` (fd's bytes [0, size) mapped) from
 * `from` on costs no more than reading them with pread, else 0: also when
 * fewer than RELAY_MAP_PROBE_MIN bytes follow `from`, when a read fails, and
 * when the sampled bytes are not all in the page cache (then both ways would
 * time the disk). What is timed is only what differs between the two ways:
 * faulting pieces of the mapping in and dropping their page-table entries
 * again, against reading other pieces into `buf` (RELAY_MAP_PROBE_BUF bytes);
 * the scanning that follows costs the same either way. Of the 2 MiB from
 * `from` (a multiple of the page size) it touches the first and third 512 KiB
 * of the mapping, whose page-table entries it leaves dropped, and reads the
 * other two: a caller that fears the file shrinking guards the mapping
 * (map_guard.h). */
int relay_map_probe(int fd, const char *map, off_t from, off_t size, char *buf);

/* relay_map_probe with its own buffer and its reads of `map` (fd's bytes
 * [0, size)) guarded: a file cut short under it answers 0. The caller holds
 * the guard (relay_map_guard_hold). */
int relay_map_probe_guarded(int fd, const char *map, off_t from, off_t size);

#endif
