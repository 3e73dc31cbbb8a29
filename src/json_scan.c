/* Strict JSON scanner: one forward pass, explicit nesting stack, word-at-a-time
 * skipping of ASCII string runs and digit runs. See include/relay/json_scan.h. */
#include "relay/json_scan.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SCAN_AVX2 1
#else
#define SCAN_AVX2 0
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SCAN_SWAR 1
#else
#define SCAN_SWAR 0
#endif

#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

typedef const unsigned char *cursor;

/* Sentinel `what` for the one error that has its own wording. */
static const char too_deep[] = "nesting";

/* Where and why a scan failed; `utf8` selects the "invalid UTF-8" wording. */
typedef struct scan_error {
    const char *what;
    cursor at;
    int utf8;
} scan_error;

/* Bytes that end a plain run inside a string: '"', '\\', controls, non-ASCII. */
static const unsigned char string_stop[256] = {
    [0 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
    [0x80 ... 0xff] = 1,
};

static const unsigned char is_space[256] = {
    [' '] = 1,
    ['\t'] = 1,
    ['\n'] = 1,
    ['\r'] = 1,
};


#if SCAN_SWAR && !defined(__SSE2__)
static inline uint64_t
load64(cursor p)
{
    uint64_t x;

    memcpy(&x, p, sizeof(x));
    return x;
}


/* One high bit per byte of x that is zero; exact for the lowest such byte,
 * which is all the callers use. */
static inline uint64_t
zero_bytes(uint64_t x)
{
    return (x - ONES) & ~x & HIGHS;
}
#endif


static inline int
fail(scan_error *err, const char *what, cursor at)
{
    err->what = what;
    err->at = at;
    err->utf8 = 0;
    return -1;
}


#ifdef __SSE2__
static inline uint64_t
digit_mask16(cursor p)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    /* Shift '0'..'9' to the bottom of the signed range, then one compare. */
    __m128i shifted = _mm_sub_epi8(x, _mm_set1_epi8((char)('0' + 128)));

    return (uint64_t)_mm_movemask_epi8(_mm_cmplt_epi8(shifted, _mm_set1_epi8((char)(-128 + 10))));
}


/* The common short number ([-]int[.frac], under 32 bytes) from one digit
 * bitmap of the next 32 bytes. Returns NULL when the slow path must decide. */
static inline cursor
scan_number_window(cursor p)
{
    /* Bits set where a byte is NOT a digit; bits 32..63 stand for "beyond the
     * window", so every ctz below is defined. */
    uint64_t other = ~(digit_mask16(p) | digit_mask16(p + 16) << 16);
    unsigned i = *p == '-', j, n;

    n = (unsigned)__builtin_ctzll(other >> i);
    if (n == 0 || (n > 1 && p[i] == '0')) {
        return NULL;
    }
    j = i + n;
    if (j < 32 && p[j] == '.') {
        n = (unsigned)__builtin_ctzll(other >> (j + 1));
        if (n == 0) {
            return NULL;
        }
        j += 1 + n;
    }
    if (j >= 32 || (p[j] | 0x20) == 'e') {
        return NULL;
    }
    return p + j;
}
#endif


/* Skip [0-9]*, a vector or a word at a time. */
static inline cursor
skip_digits(cursor p, cursor end)
{
#ifdef __SSE2__
    while (end - p >= 16) {
        unsigned digit = (unsigned)digit_mask16(p);

        if (digit != 0xffff) {
            return p + __builtin_ctz(~digit);
        }
        p += 16;
    }
#elif SCAN_SWAR
    while (end - p >= 8) {
        uint64_t x = load64(p);
        uint64_t bad =
            ((x & UINT64_C(0xf0f0f0f0f0f0f0f0)) ^ UINT64_C(0x3030303030303030))
            | (((x + UINT64_C(0x0606060606060606)) & UINT64_C(0xf0f0f0f0f0f0f0f0)) ^ UINT64_C(0x3030303030303030));

        if (bad) {
            /* Turn "byte nonzero" into its high bit, then find the first. */
            bad = (bad | ((bad & ~HIGHS) + ~HIGHS)) & HIGHS;
            return p + (__builtin_ctzll(bad) >> 3);
        }
        p += 8;
    }
#endif
    while (p < end && (unsigned)(*p - '0') < 10) {
        p++;
    }
    return p;
}


/* Skip a number per the RFC grammar; *p is '-' or a digit. */
static cursor
scan_number(cursor p, cursor end, scan_error *err)
{
    cursor q;

#ifdef __SSE2__
    if (end - p >= 32 && (q = scan_number_window(p))) {
        return q;
    }
#endif
    if (*p == '-') {
        p++;
    }
    if (p < end && *p == '0') {
        p++;
        if (p < end && (unsigned)(*p - '0') < 10) {
            fail(err, "leading zero in number", p);
            return NULL;
        }
    } else if (p < end && (unsigned)(*p - '1') < 9) {
        p = skip_digits(p + 1, end);
    } else {
        fail(err, "invalid number", p);
        return NULL;
    }
    if (p < end && *p == '.') {
        q = skip_digits(p + 1, end);
        if (q == p + 1) {
            fail(err, "expected a digit after '.'", q);
            return NULL;
        }
        p = q;
    }
    if (p < end && (*p | 0x20) == 'e') {
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }
        q = skip_digits(p, end);
        if (q == p) {
            fail(err, "expected a digit in exponent", q);
            return NULL;
        }
        p = q;
    }
    return p;
}


/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0.
 * Rejects overlongs, UTF-16 surrogates (U+D800..DFFF), code points above
 * U+10FFFF and truncated sequences. */
static size_t
utf8_sequence(cursor p, cursor end)
{
    unsigned c = p[0], lo = 0x80, hi = 0xbf;
    size_t n, i;

    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
    } else {
        return 0;
    }
    if (c == 0xe0) {
        lo = 0xa0;
    } else if (c == 0xed) {
        hi = 0x9f;
    } else if (c == 0xf0) {
        lo = 0x90;
    } else if (c == 0xf4) {
        hi = 0x8f;
    }
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi) {
        return 0;
    }
    for (i = 2; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0;
        }
    }
    return n;
}


static int
hex4(cursor p, cursor end, unsigned *out)
{
    unsigned v = 0;
    int i;

    if (end - p < 4) {
        return -1;
    }
    for (i = 0; i < 4; i++) {
        unsigned c = p[i], d;

        if ((unsigned)(c - '0') < 10) {
            d = c - '0';
        } else if ((unsigned)((c | 0x20) - 'a') < 6) {
            d = (c | 0x20) - 'a' + 10;
        } else {
            return -1;
        }
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}


/* Validate one escape; p points at the backslash. A \u escape that forms a
 * lone surrogate is rejected even though RFC 8259's grammar allows it: it has
 * no UTF-8 encoding, so the decoded event could not be valid UTF-8. */
static cursor
scan_escape(cursor p, cursor end, scan_error *err)
{
    unsigned u, lo;

    if (end - p < 2) {
        fail(err, "unterminated string", end);
        return NULL;
    }
    switch (p[1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        return p + 2;
    case 'u':
        break;
    default:
        fail(err, "invalid escape", p);
        return NULL;
    }
    if (hex4(p + 2, end, &u) < 0) {
        fail(err, "invalid \\u escape", p);
        return NULL;
    }
    if (u >= 0xdc00 && u <= 0xdfff) {
        fail(err, "lone surrogate in \\u escape", p);
        return NULL;
    }
    if (u < 0xd800 || u > 0xdbff) {
        return p + 6;
    }
    if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || hex4(p + 8, end, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff) {
        fail(err, "lone surrogate in \\u escape", p);
        return NULL;
    }
    return p + 12;
}


#ifdef __SSE2__
/* Bit i set when p[i] ends a plain run: '"', '\\', a control or non-ASCII. */
static inline unsigned
plain_stops16(cursor p)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    /* Signed compare: bytes >= 0x80 are negative, so this one test
     * catches both controls and non-ASCII. */
    __m128i stop =
        _mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
                     _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))));

    return (unsigned)_mm_movemask_epi8(stop);
}
#endif


/* Skip a plain run of printable ASCII other than '"' and '\\'. */
static inline cursor
skip_plain(cursor p, cursor end)
{
#ifdef __SSE2__
    while (end - p >= 16) {
        unsigned mask = plain_stops16(p);

        if (mask) {
            return p + __builtin_ctz(mask);
        }
        p += 16;
    }
#elif SCAN_SWAR
    while (end - p >= 8) {
        uint64_t x = load64(p);
        uint64_t stop = (x | ((x - UINT64_C(0x2020202020202020)) & ~x) | zero_bytes(x ^ UINT64_C(0x2222222222222222))
                         | zero_bytes(x ^ UINT64_C(0x5c5c5c5c5c5c5c5c)))
                        & HIGHS;

        if (stop) {
            return p + (__builtin_ctzll(stop) >> 3);
        }
        p += 8;
    }
#endif
    while (p < end && !string_stop[*p]) {
        p++;
    }
    return p;
}


/* Scan string contents; p is just past the opening quote. Returns the
 * position of the closing quote and sets *escaped if a backslash was seen. */
static cursor
scan_string(cursor p, cursor end, int *escaped, scan_error *err)
{
    size_t n;

    for (;;) {
        p = skip_plain(p, end);
        if (p >= end) {
            fail(err, "unterminated string", end);
            return NULL;
        }
        if (*p == '"') {
            return p;
        }
        if (*p == '\\') {
            *escaped = 1;
            if (!(p = scan_escape(p, end, err))) {
                return NULL;
            }
        } else if (*p < 0x20) {
            fail(err, "control character in string", p);
            return NULL;
        } else if ((n = utf8_sequence(p, end)) != 0) {
            p += n;
        } else {
            fail(err, NULL, p);
            err->utf8 = 1;
            return NULL;
        }
    }
}


/* scan_string, with the common short plain string (its closing quote in
 * the next 16 bytes) found inline, without a call. */
static inline cursor
scan_short_string(cursor p, cursor end, int *escaped, scan_error *err)
{
#ifdef __SSE2__
    if (end - p >= 16) {
        unsigned mask = plain_stops16(p);

        if (mask && p[__builtin_ctz(mask)] == '"') {
            return p + __builtin_ctz(mask);
        }
    }
#endif
    return scan_string(p, end, escaped, err);
}


/* Skip a literal; *p is its first letter. Bytes >= 0x80 mean bad UTF-8 or a
 * misplaced character, and either way the text is not JSON. */
static cursor
scan_literal(cursor p, cursor end, const char *word, size_t n, scan_error *err)
{
    if ((size_t)(end - p) < n || memcmp(p, word, n) != 0) {
        fail(err, "expected a value", p);
        return NULL;
    }
    return p + n;
}


/* The scanner's working state: the nesting stack and the visitor. */
typedef struct scanner {
    cursor start, end;
    const relay_json_visitor *v;
    int depth;
    int misses; /* block fast-path attempts that gained little */
    int32_t token[RELAY_JSON_MAX_DEPTH + 1];
    uint64_t key_lengths[RELAY_JSON_MAX_DEPTH + 1]; /* a tracked object's (see the visitor) */
    unsigned char is_object[RELAY_JSON_MAX_DEPTH + 1];
    /* Line mode (relay_json_scan_line): a newline is never skipped as
     * whitespace, and the top-level value may end at one. */
    int line_mode;
    int eol_at_end; /* line mode: `end` is where the last line ends */
    cursor stop;    /* line mode: where the line ended */
} scanner;


/* Whitespace, except that a newline ends the skip in line mode (it is then
 * refused wherever the scanner stands: the line has ended within the value). */
static inline cursor
skip_space(const scanner *s, cursor p, cursor end)
{
    while (p < end && is_space[*p]) {
        if (*p == '\n' && s->line_mode) {
            break;
        }
        p++;
    }
    return p;
}


static inline void
report_scalar(scanner *s, int32_t slot, relay_json_type type, cursor from, cursor to, int esc)
{
    if (slot >= 0) {
        s->v->on_scalar(s->v->ctx, slot, type, (const char *)from, (size_t)(to - from), esc);
    }
}


/* Open a container below `slot`; returns 0, or -1 when too deep. */
static inline int
open_container(scanner *s, int32_t slot, int object)
{
    int32_t tok = -1;

    if (s->depth == RELAY_JSON_MAX_DEPTH) {
        return -1;
    }
    if (slot >= 0) {
        tok = object ? s->v->on_object(s->v->ctx, slot) : s->v->on_array(s->v->ctx, slot);
    }
    s->depth++;
    s->token[s->depth] = tok;
    s->is_object[s->depth] = (unsigned char)object;
    if (object && tok >= 0) {
        s->key_lengths[s->depth] = s->v->key_lengths ? s->v->key_lengths(s->v->ctx, tok) : ~UINT64_C(0);
    }
    return 0;
}


/* The token a key of the current object gets: -1 for an untracked object,
 * or a plain key of a length the visitor never tracks there. */
static inline int32_t
key_token(scanner *s, cursor key, size_t len, int esc)
{
    int32_t obj = s->token[s->depth];

    if (obj < 0 || (!esc && !(s->key_lengths[s->depth] >> (len < 63 ? len : 63) & 1))) {
        return -1;
    }
    return s->v->on_key(s->v->ctx, obj, (const char *)key, len, esc);
}


/* ---- Block fast path for untracked arrays of plain numbers ----
 *
 * GeoJSON coordinates ([[[-122.48,37.76,0],...]]) are most of a typical
 * event. Instead of a token at a time, classify 64 bytes into bitmasks and
 * check the whole grammar of "arrays of [-]int[.frac], no whitespace" with
 * word operations. The path only ever commits a prefix it proved valid and
 * stops at the first byte it is unsure about (exponent, whitespace, string,
 * object, bad byte...). The scalar scanner takes over after the last ','
 * before that byte (or at the end of the array, or at its '[' when no ','
 * is near) and produces the exact same result and error message as if the
 * fast path did not exist. */

typedef struct block_masks {
    uint64_t digit, zero, minus, dot, comma, open, close;
} block_masks;

/* After this many attempts that gained under 32 bytes, an event stops
 * trying the block path (whitespace-formatted arrays, say). */
#define FAST_MISSES 8

/* -1 = not chosen yet; see relay_json_set_simd. */
static int simd_level = -1;
/* The first scans may run on several threads at once (relay_match_scan_memory):
 * the automatic pick happens exactly once, before any of them reads the level. */
static pthread_once_t simd_picked = PTHREAD_ONCE_INIT;


/* Portable classifier: the reference for the vector ones. */
static void
classify_scalar(cursor p, block_masks *m)
{
    unsigned i;

    memset(m, 0, sizeof(*m));
    for (i = 0; i < 64; i++) {
        uint64_t bit = UINT64_C(1) << i;

        if ((unsigned)(p[i] - '0') < 10) {
            m->digit |= bit;
        }
        m->zero |= p[i] == '0' ? bit : 0;
        m->minus |= p[i] == '-' ? bit : 0;
        m->dot |= p[i] == '.' ? bit : 0;
        m->comma |= p[i] == ',' ? bit : 0;
        m->open |= p[i] == '[' ? bit : 0;
        m->close |= p[i] == ']' ? bit : 0;
    }
}


#ifdef __SSE2__
static inline __attribute__((always_inline)) uint64_t
eq16(__m128i x, char c)
{
    return (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(c)));
}


static inline __attribute__((always_inline)) void
classify_sse2(cursor p, block_masks *m)
{
    unsigned i;

    memset(m, 0, sizeof(*m));
    for (i = 0; i < 64; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + i));

        m->digit |= digit_mask16(p + i) << i;
        m->zero |= eq16(x, '0') << i;
        m->minus |= eq16(x, '-') << i;
        m->dot |= eq16(x, '.') << i;
        m->comma |= eq16(x, ',') << i;
        m->open |= eq16(x, '[') << i;
        m->close |= eq16(x, ']') << i;
    }
}
#endif


#if SCAN_AVX2
__attribute__((target("avx2,bmi,bmi2,popcnt"), always_inline)) static inline uint64_t
eq32(__m256i x, char c)
{
    return (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, _mm256_set1_epi8(c)));
}


/* Compiled for AVX2 alone, so the build needs no global -mavx2; only called
 * after __builtin_cpu_supports("avx2"). */
__attribute__((target("avx2,bmi,bmi2,popcnt"), always_inline)) static inline void
classify_avx2(cursor p, block_masks *m)
{
    __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
    __m256i bias = _mm256_set1_epi8((char)('0' + 128)), ten = _mm256_set1_epi8((char)(-128 + 10));

    m->digit = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(ten, _mm256_sub_epi8(lo, bias)))
               | (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(ten, _mm256_sub_epi8(hi, bias))) << 32;
    m->zero = eq32(lo, '0') | eq32(hi, '0') << 32;
    m->minus = eq32(lo, '-') | eq32(hi, '-') << 32;
    m->dot = eq32(lo, '.') | eq32(hi, '.') << 32;
    m->comma = eq32(lo, ',') | eq32(hi, ',') << 32;
    m->open = eq32(lo, '[') | eq32(hi, '[') << 32;
    m->close = eq32(lo, ']') | eq32(hi, ']') << 32;
}


/* AVX-512BW compares give the 64-bit masks directly: one load and eight
 * compares per block instead of two halves, fourteen movemasks and the
 * shifts that join them. Same target rule as the AVX2 classifier. */
__attribute__((target("avx512f,avx512bw,bmi,bmi2,popcnt"), always_inline)) static inline uint64_t
eq64(__m512i x, char c)
{
    return (uint64_t)_mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(c));
}


__attribute__((target("avx512f,avx512bw,bmi,bmi2,popcnt"), always_inline)) static inline void
classify_avx512(cursor p, block_masks *m)
{
    __m512i x = _mm512_loadu_si512((const void *)p);

    m->digit = (uint64_t)_mm512_cmplt_epu8_mask(_mm512_sub_epi8(x, _mm512_set1_epi8('0')), _mm512_set1_epi8(10));
    m->zero = eq64(x, '0');
    m->minus = eq64(x, '-');
    m->dot = eq64(x, '.');
    m->comma = eq64(x, ',');
    m->open = eq64(x, '[');
    m->close = eq64(x, ']');
}
#endif


int
relay_json_set_simd(int level)
{
    /* The portable classifier is slower than the plain scanner, so AUTO
     * only takes a vector one; tests may still ask for PORTABLE. */
#ifdef __SSE2__
    int best = RELAY_JSON_SIMD_SSE2, pick = RELAY_JSON_SIMD_SSE2;
#else
    int best = RELAY_JSON_SIMD_PORTABLE, pick = RELAY_JSON_SIMD_OFF;
#endif

#if SCAN_AVX2
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2")
        && __builtin_cpu_supports("popcnt")) {
        best = pick = RELAY_JSON_SIMD_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
            best = pick = RELAY_JSON_SIMD_AVX512;
        }
    }
#endif
    simd_level = level < 0 ? pick : level > best ? best : level;
    return simd_level;
}


/* AUTO, unless a caller chose a level before the first scan. */
static void
pick_simd(void)
{
    if (simd_level < 0) {
        relay_json_set_simd(RELAY_JSON_SIMD_AUTO);
    }
}


/* Blocks overlap by two bytes: each after the first starts 62 bytes after
 * the one before, so the bytes a check looks back at are in the block
 * itself. Those first two bytes were judged by the block before, with what
 * came before them, and are left out of everything but the look-back. The
 * first block's first byte is the array's '[', applied before the loop. */
#define BLOCK_STRIDE 62
#define BLOCK_SEEN UINT64_C(3)


/* Bit i set when byte i breaks the grammar of "arrays of [-]int[.frac]
 * without whitespace". Every byte must be one of 0-9 - . , [ ] and may only
 * follow bytes that can precede it; no leading zero, no second '.' in a
 * number. Bit 0 has no byte before it, so its bit (and bit 1's, for a
 * leading zero) is meaningless: the caller drops them, as bytes seen
 * before. *frac says whether a fraction's digit run reaches bit 0, and is
 * set for the next block, whose bit 0 is this one's bit 62. */
static inline __attribute__((always_inline)) uint64_t
block_errors(const block_masks *m, uint64_t *frac)
{
    uint64_t d = m->digit, c = m->comma, o = m->open, x = m->close;
    uint64_t pd = d << 1, pc = c << 1, po = o << 1, px = x << 1;
    uint64_t starts = d & (pc | po | m->minus << 1);
    uint64_t bad = ~(d | m->minus | m->dot | c | o | x), run;

    bad |= d & px;                      /* digit after ']' */
    bad |= m->dot & ~pd;                /* '.' only after a digit */
    bad |= (m->minus | o) & ~(pc | po); /* '-' and '[' start a value */
    bad |= c & ~(pd | px);              /* ',' ends a value */
    bad |= x & ~(pd | px | po);         /* ']' ends a value or [] */
    bad |= (starts & m->zero) << 1 & d; /* leading zero */
    /* Adding a fraction's first bit carries to just past its digit run,
     * which must not be another '.' ("1.2.3"). The sum differs from the
     * digits at bit 62 when a '.' is just before it or a carry reached it
     * (never both: only a digit passes a carry on). */
    run = (m->dot << 1 | *frac) + d;
    bad |= run & ~d & m->dot;
    *frac = (run ^ d) >> 62 & 1;
    return bad;
}


/* Where one block's commit ends and what state the scalar scanner resumes
 * in: `after` is 1 after a complete value, 0 at a value position. */
typedef struct block_cut {
    unsigned at;
    int after;
} block_cut;


/* Follow the brackets in `b` (one block's, in order), updating s->depth.
 * Stops at the end of the untracked value: the ']' that closes it (object
 * base) or would close the base array, or a '[' beyond the depth limit.
 * Returns 1 with *cut set when it stopped. The levels it opens get their
 * state when the block loop ends (skip_number_arrays). */
static inline int
block_brackets(scanner *s, uint64_t b, uint64_t close, int base, int base_object, block_cut *cut)
{
    int d = s->depth, stop = 0;

    while (b) {
        unsigned i = (unsigned)__builtin_ctzll(b);

        if (close >> i & 1) {
            if (d == base) {
                cut->at = i;
                cut->after = 1;
                stop = 1;
                break;
            }
            d--;
            if (d == base && base_object) {
                cut->at = i + 1;
                cut->after = 1;
                stop = 1;
                break;
            }
        } else {
            if (d == RELAY_JSON_MAX_DEPTH) {
                cut->at = i;
                cut->after = 0;
                stop = 1;
                break;
            }
            d++;
        }
        b &= b - 1;
    }
    s->depth = d;
    return stop;
}


/* Bits 0..n-1. */
static inline uint64_t
below(unsigned n)
{
    return n >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << n) - 1;
}


/* The block loop's state between blocks. */
typedef struct block_stream {
    cursor start;    /* the untracked array's '[' */
    int base;        /* the depth outside it */
    int base_object; /* whether that level is an object */
    int depth;       /* at the block's first byte not seen before */
    int prev_depth;  /* the same for the block before */
    uint64_t fresh;  /* the block's bytes not seen before */
    uint64_t frac;   /* see block_errors */
} block_stream;


/* How a block leaves the loop. */
enum { BLOCK_NEXT, BLOCK_STOP, BLOCK_LOOK_BACK };


/* Resume the scalar scanner just past the block's last new ',' before
 * `limit`, if it has one: the furthest point proven valid at which a value
 * may start. Returns 1 with *out and s->depth set. */
static inline __attribute__((always_inline)) int
block_commit(scanner *s, const block_masks *m, cursor p, int depth, uint64_t fresh, unsigned limit, cursor *out)
{
    uint64_t commas = m->comma & fresh & below(limit), upto;
    unsigned k;

    if (!commas) {
        return 0;
    }
    k = 64 - (unsigned)__builtin_clzll(commas);
    upto = fresh & below(k);
    s->depth = depth + __builtin_popcountll(m->open & upto) - __builtin_popcountll(m->close & upto);
    *out = p + k;
    return 1;
}


/* A block that is bad somewhere or may end the untracked value: follow its
 * brackets before the first bad byte one by one. Returns BLOCK_NEXT when
 * the whole block was valid, else stops the loop here (*out, *after and
 * s->depth set) or asks for the block before, when this one has no ','
 * before its first bad byte and is not the first. The first one then
 * commits nothing: the scalar scanner reads the array from its '['. */
static inline __attribute__((always_inline)) int
block_slow(scanner *s, block_stream *st, const block_masks *m, uint64_t bad, cursor p, cursor *out, int *after)
{
    block_cut cut;
    unsigned limit = bad ? (unsigned)__builtin_ctzll(bad) : 64;

    s->depth = st->depth;
    if (block_brackets(s, (m->open | m->close) & st->fresh & below(limit), m->close, st->base, st->base_object, &cut)) {
        *out = p + cut.at;
        *after = cut.after;
        return BLOCK_STOP;
    }
    if (!bad) {
        st->prev_depth = st->depth;
        st->depth = s->depth;
        st->fresh = ~BLOCK_SEEN;
        s->depth = st->base;
        return BLOCK_NEXT;
    }
    *after = 0;
    if (block_commit(s, m, p, st->depth, st->fresh, limit, out)) {
        return BLOCK_STOP;
    }
    if (p != st->start) {
        return BLOCK_LOOK_BACK;
    }
    s->depth = st->base;
    *out = st->start;
    return BLOCK_STOP;
}


/* One block of the loop, classified into m: see block_slow. Its brackets
 * are counted instead of followed when no stop can fall among them: the
 * depth stays above the base even if every ']' but those after the first
 * one's leading '['s came first, and within the limit even if every '['
 * did. That holds for most blocks of a coordinate list. */
static inline __attribute__((always_inline)) int
block_step(scanner *s, block_stream *st, const block_masks *m, cursor p, cursor *out, int *after)
{
    uint64_t bad = block_errors(m, &st->frac) & st->fresh;
    uint64_t open = m->open & st->fresh, close = m->close & st->fresh;
    int opens = __builtin_popcountll(open), closes = __builtin_popcountll(close);
    int leading = __builtin_popcountll(open & (close - 1) & ~close); /* before the first ']' */

    if (__builtin_expect(!bad && st->depth + leading - closes > st->base && st->depth + opens <= RELAY_JSON_MAX_DEPTH,
                         1)) {
        st->prev_depth = st->depth;
        st->depth += opens - closes;
        st->fresh = ~BLOCK_SEEN;
        return BLOCK_NEXT;
    }
    return block_slow(s, st, m, bad, p, out, after);
}


/* The stop needs the last ',' of the block before, at p (classified into
 * m), which was valid throughout; with none there either, nothing is
 * committed (a number longer than a block, say: rare enough that the blocks
 * before are not searched). */
static cursor
block_look_back(scanner *s, const block_stream *st, const block_masks *m, cursor p)
{
    cursor out = st->start;

    if (!block_commit(s, m, p, st->prev_depth, p == st->start ? ~UINT64_C(1) : ~BLOCK_SEEN, 64, &out)) {
        s->depth = st->base;
    }
    return out;
}


/* The block loop over the untracked array at p, one copy per classifier so
 * each can be compiled for its own instruction set. Blocks follow each other
 * BLOCK_STRIDE bytes apart whatever they hold, so no load waits on the
 * checks of the block before. The tail is copied into NUL padding, which is
 * never valid, so nothing past `end` is committed and the last step always
 * stops; it is outside the loop so the loop makes no calls. s->depth stays
 * the base until the loop stops. */
#define DEFINE_SKIP_BLOCKS(name, classify_fn)                                                                 \
    static cursor name(scanner *s, cursor p, cursor end, int *after)                                          \
    {                                                                                                         \
        block_stream st = {p, s->depth, s->is_object[s->depth], s->depth + 1, s->depth + 1, ~UINT64_C(1), 0}; \
        unsigned char pad[64];                                                                                \
        block_masks m;                                                                                        \
        cursor out = p;                                                                                       \
        int how = BLOCK_NEXT;                                                                                 \
                                                                                                              \
        for (; end - p >= 64 && how == BLOCK_NEXT; p += BLOCK_STRIDE) {                                       \
            classify_fn(p, &m);                                                                               \
            how = block_step(s, &st, &m, p, &out, after);                                                     \
        }                                                                                                     \
        if (how == BLOCK_NEXT) {                                                                              \
            memset(pad, 0, sizeof(pad));                                                                      \
            memcpy(pad, p, (size_t)(end - p));                                                                \
            classify_fn(pad, &m);                                                                             \
            how = block_step(s, &st, &m, p, &out, after);                                                     \
        } else {                                                                                              \
            p -= BLOCK_STRIDE;                                                                                \
        }                                                                                                     \
        if (how == BLOCK_LOOK_BACK) {                                                                         \
            classify_fn(p - BLOCK_STRIDE, &m);                                                                \
            out = block_look_back(s, &st, &m, p - BLOCK_STRIDE);                                              \
        }                                                                                                     \
        return out;                                                                                           \
    }

/* clang-format reads a macro-defined function as a declaration. */
/* clang-format off */
DEFINE_SKIP_BLOCKS(skip_blocks_portable, classify_scalar)
#ifdef __SSE2__
DEFINE_SKIP_BLOCKS(skip_blocks_sse2, classify_sse2)
#endif
#if SCAN_AVX2
/* Compiled for AVX2 or AVX-512BW (with the BMI/POPCNT every such CPU has)
 * alone, so the build needs no global -mavx2; only run after
 * __builtin_cpu_supports. */
__attribute__((target("avx2,bmi,bmi2,popcnt"))) DEFINE_SKIP_BLOCKS(skip_blocks_avx2, classify_avx2)
__attribute__((target("avx512f,avx512bw,bmi,bmi2,popcnt"))) DEFINE_SKIP_BLOCKS(skip_blocks_avx512, classify_avx512)
#endif


/* Skip as much of the untracked array at p as the block path can prove
 * valid. Returns the new position (p when nothing was gained) with s->depth
 * adjusted; *after tells whether a complete value ends there. */
static cursor
skip_number_arrays(scanner *s, cursor p, cursor end, int *after)
/* clang-format on */
{
    int base = s->depth, level;
    cursor q;

    /* The loop opens the array before its first block; at the limit, the
     * scalar scanner reports it too deep. */
    if (base == RELAY_JSON_MAX_DEPTH) {
        *after = 0;
        return p;
    }
#if SCAN_AVX2
    if (simd_level == RELAY_JSON_SIMD_AVX512) {
        q = skip_blocks_avx512(s, p, end, after);
    } else if (simd_level == RELAY_JSON_SIMD_AVX2) {
        q = skip_blocks_avx2(s, p, end, after);
    } else
#endif
#ifdef __SSE2__
        if (simd_level == RELAY_JSON_SIMD_SSE2) {
        q = skip_blocks_sse2(s, p, end, after);
    } else {
#endif
        q = skip_blocks_portable(s, p, end, after);
    }
    /* Every level above the base was opened by the block loop as an
     * untracked array: its state is set once here, not per bracket in the
     * loop (~10 % of the loop's instructions with AVX2). */
    for (level = base + 1; level <= s->depth; level++) {
        s->token[level] = -1;
        s->is_object[level] = 0;
    }
    if (q - p < 32) {
        s->misses++;
    }
    return q;
}


/* Scan a key and its ':'; p is at the opening quote. Sets *slot to the token
 * of the value that follows. */
static inline __attribute__((always_inline)) cursor
scan_key(scanner *s, cursor p, int32_t *slot, scan_error *err)
{
    cursor k, q;
    int esc = 0;

    if (p >= s->end || *p != '"') {
        fail(err, "expected a string key", p);
        return NULL;
    }
    k = p + 1;
    if (!(q = scan_short_string(k, s->end, &esc, err))) {
        return NULL;
    }
    *slot = key_token(s, k, (size_t)(q - k), esc);
    p = q + 1;
    if (p < s->end && *p != ':') {
        p = skip_space(s, p, s->end);
    }
    if (p >= s->end || *p != ':') {
        fail(err, "expected ':'", p);
        return NULL;
    }
    p++;
    if (p < s->end && is_space[*p]) {
        p = skip_space(s, p, s->end);
    }
    return p;
}


/* Scan one scalar below `slot`; p is at its first byte. */
static inline cursor
scan_scalar(scanner *s, cursor p, int32_t slot, scan_error *err)
{
    cursor q;
    int esc = 0;

    switch (*p) {
    case '"':
        if (!(q = scan_short_string(p + 1, s->end, &esc, err))) {
            return NULL;
        }
        report_scalar(s, slot, RELAY_JSON_STRING, p + 1, q, esc);
        return q + 1;
    case 't':
        q = scan_literal(p, s->end, "true", 4, err);
        if (q) {
            report_scalar(s, slot, RELAY_JSON_TRUE, p, q, 0);
        }
        return q;
    case 'f':
        q = scan_literal(p, s->end, "false", 5, err);
        if (q) {
            report_scalar(s, slot, RELAY_JSON_FALSE, p, q, 0);
        }
        return q;
    case 'n':
        q = scan_literal(p, s->end, "null", 4, err);
        if (q) {
            report_scalar(s, slot, RELAY_JSON_NULL, p, q, 0);
        }
        return q;
    default:
        if (*p != '-' && (unsigned)(*p - '0') >= 10) {
            fail(err, "expected a value", p);
            return NULL;
        }
        if ((q = scan_number(p, s->end, err))) {
            report_scalar(s, slot, RELAY_JSON_NUMBER, p, q, 0);
        }
        return q;
    }
}


/* The usual pair of an object, "key":"value" or "key":number with nothing
 * between its tokens and both strings plain, the key under 32 bytes, at p
 * (the key's quote): reported and skipped in one go. Returns the position
 * after the value, a ',' or '}', or NULL when the pair is anything else (the
 * general path then reads it, and finds any error in it).
 *
 * One 32-byte stop mask from the key's first byte usually holds the whole
 * pair: the value's quotes are its next set bits, found with bit operations
 * instead of a second load at an address that waits on the first. Pairs are
 * read one after another, so that wait was most of a pair's time. */
static inline __attribute__((always_inline)) cursor
scan_plain_pair(scanner *s, cursor p, cursor end)
{
#ifdef __SSE2__
    cursor key = p + 1, key_end, v, from, to, after;
    relay_json_type type = RELAY_JSON_STRING;
    scan_error ignored;
    unsigned stops, rest, mask;

    /* The caller leaves 48 bytes from p (see scan_plain_pairs). */
    if (*p != '"') {
        return NULL;
    }
    stops = plain_stops16(key) | plain_stops16(key + 16) << 16;
    if (!stops || key[__builtin_ctz(stops)] != '"') {
        return NULL;
    }
    key_end = key + __builtin_ctz(stops);
    v = key_end + 2;
    if (key_end[1] != ':') {
        return NULL;
    }
    if (*v == '"') {
        /* Past the key's closing quote and the value's opening one (':' is
         * not a stop, so they are the two lowest bits). A key of 30 or 31
         * bytes leaves the opening one outside the mask: `rest` is then 0,
         * as for a value that ends beyond it, and the value is read after
         * its quote. */
        rest = stops & (stops - 1);
        rest &= rest - 1;
        if (rest) {
            to = key + __builtin_ctz(rest);
        } else if (end - v < 17 || !(mask = plain_stops16(v + 1))) {
            return NULL;
        } else {
            to = v + 1 + __builtin_ctz(mask);
        }
        if (*to != '"') {
            return NULL;
        }
        from = v + 1;
        after = to + 1;
    } else if (*v == '-' || (unsigned)(*v - '0') < 10) {
        if (!(after = scan_number(v, end, &ignored)) || after == end) {
            return NULL;
        }
        type = RELAY_JSON_NUMBER;
        from = v;
        to = after;
    } else {
        return NULL;
    }
    if (after >= end || (*after != ',' && *after != '}')) {
        return NULL;
    }
    report_scalar(s, key_token(s, key, (size_t)(key_end - key), 0), type, from, to, 0);
    return after;
#else
    (void)s;
    (void)p;
    (void)end;
    return NULL;
#endif
}


/* scan_plain_pair over the pairs of an object while ',' joins them. Returns
 * where the general path goes on: at a key (*at_key set), or at the '}'
 * after the last pair read. 48 bytes from a pair's quote hold the pair
 * path's two 16-byte loads at the key and the byte after a value that ends
 * in them; a value that goes on past them has its own bound. The path is
 * off with the SIMD paths, so that tests have the general path to compare
 * it with. */
static inline cursor
scan_plain_pairs(scanner *s, cursor p, int *at_key)
{
    cursor q, end = s->end;

    *at_key = 1;
    if (simd_level == RELAY_JSON_SIMD_OFF) {
        return p;
    }
    while (end - p >= 48 && (q = scan_plain_pair(s, p, end)) != NULL) {
        if (*q == '}') {
            *at_key = 0;
            return q;
        }
        p = q + 1;
        if (p < end && is_space[*p]) {
            p = skip_space(s, p, end);
        }
    }
    return p;
}


/* The main loop: values, then what may follow them at the current depth.
 * Returns 0 or -1 with err set. */
static int
scan_all(scanner *s, cursor p, int32_t slot, scan_error *err)
{
    cursor end = s->end;
    int at_key;

value:
    if (p >= end) {
        return fail(err, "expected a value", p);
    }
    /* Only arrays that start with a number or an array can gain: one of
     * strings or objects (a pattern's [{"eq":...}]) would pay for a block
     * (or a padded copy of a short text) to learn nothing. */
    if (*p == '[' && slot < 0 && s->misses < FAST_MISSES && simd_level != RELAY_JSON_SIMD_OFF && end - p > 1
        && (p[1] == '[' || p[1] == '-' || (unsigned)(p[1] - '0') < 10)) {
        int after;
        cursor q = skip_number_arrays(s, p, end, &after);

        if (q != p) {
            p = q;
            if (after) {
                goto after;
            }
            if (p < end && is_space[*p]) {
                p = skip_space(s, p, end);
            }
            slot = -1;
            goto value_slow;
        }
    }
value_slow:
    if (p >= end) {
        return fail(err, "expected a value", p);
    }
    if (*p == '{' || *p == '[') {
        int object = *p == '{';

        if (open_container(s, slot, object) < 0) {
            return fail(err, too_deep, p);
        }
        p++;
        if (p < end && is_space[*p]) {
            p = skip_space(s, p, end);
        }
        if (p < end && *p == (object ? '}' : ']')) {
            s->depth--;
            p++;
            goto after;
        }
        if (!object) {
            slot = s->token[s->depth];
            goto value;
        }
        if (p = scan_plain_pairs(s, p, &at_key), !at_key) {
            goto after;
        }
        if (!(p = scan_key(s, p, &slot, err))) {
            return -1;
        }
        goto value;
    }
    if (slot < 0 && !s->is_object[s->depth] && (*p == '-' || (unsigned)(*p - '0') < 10)) {
        /* Untracked arrays of numbers (GeoJSON coordinates) are the bulk of
         * typical events: stay in this loop while number follows number. */
        for (;;) {
            if (!(p = scan_number(p, end, err))) {
                return -1;
            }
            if (end - p < 2 || p[0] != ',' || (p[1] != '-' && (unsigned)(p[1] - '0') >= 10)) {
                break;
            }
            p++;
        }
        goto after;
    }
    if (!(p = scan_scalar(s, p, slot, err))) {
        return -1;
    }
after:
    if (s->depth == 0) {
        p = skip_space(s, p, end);
        if (s->line_mode) {
            if (p < end ? *p != '\n' : !s->eol_at_end) {
                return fail(err, "the line goes on", p);
            }
            s->stop = p;
            return 0;
        }
        return p == end ? 0 : fail(err, "unexpected data after the value", p);
    }
    if (p < end && is_space[*p]) {
        p = skip_space(s, p, end);
    }
    if (p >= end) {
        return fail(err, "unexpected end of input", p);
    }
    if (*p == ',') {
        p++;
        if (p < end && is_space[*p]) {
            p = skip_space(s, p, end);
        }
        if (!s->is_object[s->depth]) {
            slot = s->token[s->depth];
            goto value;
        }
        if (p = scan_plain_pairs(s, p, &at_key), !at_key) {
            goto after;
        }
        if (!(p = scan_key(s, p, &slot, err))) {
            return -1;
        }
        goto value;
    }
    if (*p == (s->is_object[s->depth] ? '}' : ']')) {
        s->depth--;
        p++;
        goto after;
    }
    return fail(err, s->is_object[s->depth] ? "expected ',' or '}'" : "expected ',' or ']'", p);
}


static void
format_error(const scan_error *err, cursor start, char *reason, size_t reasonlen)
{
    size_t at = (size_t)(err->at - start);

    if (!reason || reasonlen == 0) {
        return;
    }
    if (err->utf8) {
        snprintf(reason, reasonlen, "invalid UTF-8 at byte %zu", at);
    } else if (err->what == too_deep) {
        snprintf(reason, reasonlen, "nesting deeper than %d", RELAY_JSON_MAX_DEPTH);
    } else {
        snprintf(reason, reasonlen, "invalid JSON at byte %zu: %s", at, err->what);
    }
}


static int
set_reason(char *reason, size_t reasonlen, const char *text)
{
    if (reason && reasonlen) {
        snprintf(reason, reasonlen, "%s", text);
    }
    return -1;
}


static void
scanner_init(scanner *s, const char *text, size_t len, const relay_json_visitor *visitor)
{
    pthread_once(&simd_picked, pick_simd);
    s->start = (cursor)text;
    s->end = s->start + len;
    s->v = visitor;
    s->depth = 0;
    s->misses = 0;
    s->token[0] = -1;
    s->is_object[0] = 1; /* keeps the number-array fast path off at the top level */
    s->line_mode = 0;
    s->eol_at_end = 0;
    s->stop = NULL;
}


int
relay_json_scan_object(const char *text, size_t len, size_t max_bytes, const relay_json_visitor *visitor, int32_t root,
                       char *reason, size_t reasonlen)
{
    scanner s;
    scan_error err = {NULL, NULL, 0};
    cursor p;

    if (len > max_bytes) {
        relay_json_too_large(len, max_bytes, reason, reasonlen);
        return -1;
    }
    scanner_init(&s, text, len, visitor);
    p = skip_space(&s, s.start, s.end);
    if (p == s.end) {
        return set_reason(reason, reasonlen, "empty event");
    }
    if (scan_all(&s, p, visitor && *p == '{' ? root : -1, &err) < 0) {
        format_error(&err, s.start, reason, reasonlen);
        return -1;
    }
    if (*p != '{') {
        return set_reason(reason, reasonlen, "event is not a JSON object");
    }
    return 0;
}


int
relay_json_scan_line(const char *text, size_t avail, int eol_at_end, const relay_json_visitor *visitor, int32_t root,
                     size_t *len)
{
    scanner s;
    scan_error err = {NULL, NULL, 0};
    cursor p;

    scanner_init(&s, text, avail, visitor);
    s.line_mode = 1;
    s.eol_at_end = eol_at_end;
    p = skip_space(&s, s.start, s.end);
    if (p == s.end || *p != '{' || scan_all(&s, p, root, &err) < 0) {
        return -1;
    }
    *len = (size_t)(s.stop - s.start);
    return 0;
}


void
relay_json_too_large(size_t len, size_t max_bytes, char *reason, size_t reasonlen)
{
    if (reason && reasonlen) {
        snprintf(reason, reasonlen, "event too large (%zu bytes > %zu)", len, max_bytes);
    }
}


int
relay_json_validate_object(const char *text, size_t len, size_t max_bytes, char *reason, size_t reasonlen)
{
    return relay_json_scan_object(text, len, max_bytes, NULL, -1, reason, reasonlen);
}


static size_t
put_utf8(unsigned cp, unsigned char *out)
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xc0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}


/* Decode one escape at p (just past the backslash) into out; returns the
 * bytes consumed from p. Input was validated, so no checks here. */
static size_t
decode_escape(cursor p, cursor end, unsigned char *out, size_t *written)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *hit;
    unsigned cp = 0, lo = 0xdc00;

    if (*p != 'u') {
        hit = strchr(from, *p);
        *out = (unsigned char)to[hit - from];
        *written = 1;
        return 1;
    }
    hex4(p + 1, end, &cp);
    if (cp >= 0xd800 && cp <= 0xdbff) {
        hex4(p + 7, end, &lo);
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        *written = put_utf8(cp, out);
        return 11;
    }
    *written = put_utf8(cp, out);
    return 5;
}


size_t
relay_json_unescape(const char *text, size_t len, char *out)
{
    cursor p = (cursor)text, end = p + len;
    unsigned char *o = (unsigned char *)out;
    size_t n;

    while (p < end) {
        cursor bs = memchr(p, '\\', (size_t)(end - p));

        if (!bs) {
            bs = end;
        }
        memmove(o, p, (size_t)(bs - p));
        o += bs - p;
        p = bs;
        if (p < end) {
            p++;
            p += decode_escape(p, end, o, &n);
            o += n;
        }
    }
    return (size_t)(o - (unsigned char *)out);
}


/* Exact powers of ten: every one up to 1e22 is representable. */
static const double exact_pow10[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};


/* Clinger's fast path: a mantissa below 2^53 scaled by an exact power of ten
 * is correctly rounded by one IEEE operation. Returns 0 when it does not apply. */
static int
number_fast_path(cursor p, cursor end, double *out)
{
    uint64_t mant = 0;
    int digits = 0, exp10 = 0, neg = 0, eneg = 0, e = 0;

    if (*p == '-') {
        neg = 1;
        p++;
    }
    for (; p < end && (unsigned)(*p - '0') < 10; p++, digits++) {
        mant = mant * 10 + (unsigned)(*p - '0');
    }
    if (p < end && *p == '.') {
        for (p++; p < end && (unsigned)(*p - '0') < 10; p++, digits++, exp10--) {
            mant = mant * 10 + (unsigned)(*p - '0');
        }
    }
    if (digits > 19 || mant > (UINT64_C(1) << 53)) {
        return 0;
    }
    if (p < end) {
        p++;
        if (*p == '+' || *p == '-') {
            eneg = *p++ == '-';
        }
        for (; p < end && e < 1000; p++) {
            e = e * 10 + (*p - '0');
        }
        if (p < end) {
            return 0;
        }
        exp10 += eneg ? -e : e;
    }
    if (exp10 < -22 || exp10 > 22) {
        return 0;
    }
    *out = exp10 < 0 ? (double)mant / exact_pow10[-exp10] : (double)mant * exact_pow10[exp10];
    if (neg) {
        *out = -*out;
    }
    return 1;
}


double
relay_json_number(const char *text, size_t len)
{
    char small[64], *buf = small;
    double d;

    if (number_fast_path((cursor)text, (cursor)text + len, &d)) {
        return d;
    }
    if (len >= sizeof(small) && !(buf = malloc(len + 1))) {
        return NAN;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    d = strtod(buf, NULL);
    if (buf != small) {
        free(buf);
    }
    return d;
}
