/*
 * map_ahead: a regular file mapped, and its pages faulted in on a helper
 * thread, while the caller goes on with other work; relay_match_scan_file
 * takes the mapping over (relay_match_scan_opts.ahead).
 *
 * Why: `relay match --events FILE` spends its first milliseconds loading the
 * rules on one core while the other idles, and then its matching threads set
 * a page-table entry at each first touch of the mapped file. Depending on how
 * the page cache holds the file, faulting a 190 MB file in took 1.7 ms or
 * 9-21 ms here. Done during the load, that work costs the scan nothing.
 * Whether to map stays relay_map_probe's call (include/relay/map_probe.h):
 * it is made when the mapping is started, before the helper touches it, and
 * where reading pays nothing is started. The functions below are for one
 * thread (the command's).
 */
#ifndef RELAY_MAP_AHEAD_H
#define RELAY_MAP_AHEAD_H

#include <sys/types.h>

typedef struct relay_map_ahead relay_map_ahead;

/* Map the regular file fd and start faulting it in; NULL when it is not a
 * regular file of at least RELAY_MAP_PROBE_MIN bytes, when `probe` is set
 * and the probe finds reading it faster (or its start not in the page
 * cache), or when anything fails: the scan then maps or reads it itself, as
 * without. `probe` 0 is for a scan forced to map (RELAY_MATCH_ACCESS_MAP). */
relay_map_ahead *relay_map_ahead_start(int fd, int probe);

/* The mapping of fd's bytes [0, size) when `ahead` holds that very file at
 * that size, its helper stopped; the caller then owns the mapping (munmap),
 * which the probe has found worth mapping. NULL otherwise, `ahead` left as it
 * was. */
void *relay_map_ahead_take(relay_map_ahead *ahead, int fd, off_t size);

/* Stop the helper (a scan that reads rather than maps does, so that it does
 * not fault pages in for nothing); the mapping stays. NULL is fine. */
void relay_map_ahead_stop(relay_map_ahead *ahead);

/* Stop the helper and unmap what was not taken. NULL is fine. */
void relay_map_ahead_free(relay_map_ahead *ahead);

#endif
