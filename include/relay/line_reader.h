/*
 * line_reader: the lines that start in one byte range of a regular file, read
 * with pread(2) into a buffer the caller keeps from range to range. This is
 * how the threads of `relay match --events FILE` share a file: each takes a
 * range and sees exactly the lines that begin in it, whole, the last one
 * included even where it runs past the range's end.
 *
 * The same lines can come from a mapping of the file instead (the range's
 * `map`): no copy, but each first touch of a page sets a page-table entry,
 * which a paravirtualised host makes expensive (finding the newlines of a
 * 190 MB file: ~100 ms mapped vs ~25-35 ms through 256 KiB reads there,
 * 20 vs 27 ms on a KVM guest with hardware paging). src/map_probe.c tells
 * which way this host reads faster. A file that shrinks gives a short read;
 * mapped, a page past its new end raises SIGBUS, which run turns into the
 * same result (the mapping's owner holds the guard of
 * include/relay/map_guard.h while it lives), and within its last page, where
 * the bytes past the new end read as zeros, run checks the size before
 * handing a line over.
 */
#ifndef RELAY_LINE_READER_H
#define RELAY_LINE_READER_H

#include <stddef.h>
#include <sys/types.h>

/* relay_line_reader_run's results (other than 0: every line was handed over). */
#define RELAY_LINES_STOPPED 1   /* the callback asked to stop */
#define RELAY_LINES_ERROR (-1)  /* a read failed (mapped: a page could not be read in): errno says why */
#define RELAY_LINES_SHRANK (-2) /* the file ended before `size` */
#define RELAY_LINES_NOMEM (-3)  /* the buffer could not grow */

/* How much one read takes: about an L2 cache, so that what a read copied is
 * still there when it is matched. The buffer starts this large and grows only
 * for a longer line. */
#define RELAY_LINE_READER_PIECE ((size_t)256 << 10)

typedef struct relay_line_reader {
    char *buf;
    size_t cap;
} relay_line_reader; /* zero-initialise; relay_line_reader_free when done */

typedef struct relay_line_range {
    int fd;
    off_t first;      /* where the whole scan began: a line starts there */
    off_t start, end; /* the lines that start in [start, end) */
    off_t size;       /* the file's size when the scan began: nothing past it is read */
    size_t keep;      /* the longest line handed over whole */
    const char *map;  /* NULL, or the file's bytes [0, size) mapped: lines come from there */
} relay_line_range;

/* One line, its newline excluded. `text` is NULL for a line longer than
 * `keep`, which is read past without being held: only its length is known.
 * A nonzero return stops the run. */
typedef int (*relay_line_fn)(void *ctx, const char *text, size_t len);

/* Optional, tried first for each line: settle the line that starts at `text`
 * before its end is known, reading at most `avail` bytes (eol_at_end: text +
 * avail ends the file's last line). Returns 0 when it handled the line, with its
 * length (newline excluded) in *len; 1 likewise and stop the run; -1 when it
 * did not, and the line is then found and handed to relay_line_fn as usual.
 * Finding each line's end first is a pass over every byte that a scan of the
 * line itself makes anyway. */
typedef int (*relay_line_ahead_fn)(void *ctx, const char *text, size_t avail, int eol_at_end, size_t *len);

typedef struct relay_line_calls {
    relay_line_fn line;
    relay_line_ahead_fn ahead; /* NULL: every line goes to `line` */
    void *ctx;
} relay_line_calls;

int relay_line_reader_run(relay_line_reader *r, const relay_line_range *range, const relay_line_calls *calls);

void relay_line_reader_free(relay_line_reader *r);

#endif
