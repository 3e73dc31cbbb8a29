/* Unit tests for the strict JSON scanner (include/relay/json_scan.h). */
#include "check.h"
#include "relay/json_scan.h"

#include <math.h>
#include <stdint.h>

#define MAX (1u << 20)

static char reason[256];


static int
valid(const char *text)
{
    return relay_json_validate_object(text, strlen(text), MAX, reason, sizeof(reason)) == 0;
}


/* The reason for an invalid text, or "" when it was valid. */
static const char *
why(const char *text, size_t len)
{
    if (relay_json_validate_object(text, len, MAX, reason, sizeof(reason)) == 0) {
        return "";
    }
    return reason;
}


#define WHY(lit) why(lit, sizeof(lit) - 1)


static void
test_valid(void)
{
    CHECK(valid("{}"));
    CHECK(valid(" \t\r\n{ } \n"));
    CHECK(valid("{\"a\":1,\"b\":[1,2.5,-0,0.0,1e5,1E+5,1e-5,-12.75e-3],\"c\":{\"d\":null}}"));
    CHECK(valid("{\"a\":true,\"b\":false,\"c\":\"x\\\"y\\\\z\\/\\b\\f\\n\\r\\t\\u00e9\"}"));
    CHECK(valid("{\"s\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}"));
    CHECK(valid("{\"pair\":\"\\ud83d\\ude00\"}"));
    CHECK(valid("{\"big\":1e400,\"neg\":-1e400,\"i\":18446744073709551616}"));
    CHECK(valid("{\"a\":1,\"a\":2}")); /* duplicates are valid; last wins later */
    CHECK(valid("{\"nul\":\"\\u0000\"}"));
    CHECK(valid("{\"long\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}"));
    CHECK(valid("{\"n\":[-122.42200352825247,37.80848009696725,0,1234567890123456789012345678901234]}"));
}


static void
test_invalid_json(void)
{
    CHECK_STR(WHY(""), "empty event");
    CHECK_STR(WHY("  \n "), "empty event");
    CHECK_STR(WHY("[1]"), "event is not a JSON object");
    CHECK_STR(WHY("\"s\""), "event is not a JSON object");
    CHECK_STR(WHY("12"), "event is not a JSON object");
    CHECK_STR(WHY("null"), "event is not a JSON object");
    CHECK_STR(WHY("{\"a\" 1}"), "invalid JSON at byte 5: expected ':'");
    CHECK_STR(WHY("{\"a\":1,}"), "invalid JSON at byte 7: expected a string key");
    CHECK_STR(WHY("{\"a\":1"), "invalid JSON at byte 6: unexpected end of input");
    CHECK_STR(WHY("{\"a\":1]"), "invalid JSON at byte 6: expected ',' or '}'");
    CHECK_STR(WHY("{\"a\":[1}"), "invalid JSON at byte 7: expected ',' or ']'");
    CHECK_STR(WHY("{} x"), "invalid JSON at byte 3: unexpected data after the value");
    CHECK_STR(WHY("{}{}"), "invalid JSON at byte 2: unexpected data after the value");
    CHECK_STR(WHY("{a:1}"), "invalid JSON at byte 1: expected a string key");
    CHECK_STR(WHY("{\"a\":tru}"), "invalid JSON at byte 5: expected a value");
    CHECK_STR(WHY("{\"a\":nul}"), "invalid JSON at byte 5: expected a value");
    CHECK_STR(WHY("{\"a\":\"x}"), "invalid JSON at byte 8: unterminated string");
    CHECK_STR(WHY("{\"a\":'x'}"), "invalid JSON at byte 5: expected a value");
    CHECK_STR(WHY("{\"a\":\"\\x\"}"), "invalid JSON at byte 6: invalid escape");
    CHECK_STR(WHY("{\"a\":\"\\u12g4\"}"), "invalid JSON at byte 6: invalid \\u escape");
}


static void
test_numbers(void)
{
    CHECK_STR(WHY("{\"a\":01}"), "invalid JSON at byte 6: leading zero in number");
    CHECK_STR(WHY("{\"a\":-01}"), "invalid JSON at byte 7: leading zero in number");
    CHECK_STR(WHY("{\"a\":+1}"), "invalid JSON at byte 5: expected a value");
    CHECK_STR(WHY("{\"a\":.5}"), "invalid JSON at byte 5: expected a value");
    CHECK_STR(WHY("{\"a\":1.}"), "invalid JSON at byte 7: expected a digit after '.'");
    CHECK_STR(WHY("{\"a\":1e}"), "invalid JSON at byte 7: expected a digit in exponent");
    CHECK_STR(WHY("{\"a\":1e+}"), "invalid JSON at byte 8: expected a digit in exponent");
    CHECK_STR(WHY("{\"a\":-}"), "invalid JSON at byte 6: invalid number");
    CHECK_STR(WHY("{\"a\":NaN}"), "invalid JSON at byte 5: expected a value");
    CHECK_STR(WHY("{\"a\":Infinity}"), "invalid JSON at byte 5: expected a value");
    CHECK_STR(WHY("{\"a\":[0x10]}"), "invalid JSON at byte 7: expected ',' or ']'");
    /* long numbers take the scalar path and the window path alike */
    CHECK_STR(WHY("{\"a\":[1.0000000000000000000000000000000000000001,"
                  "000000000000000000000000000000000000000000000]}"),
              "invalid JSON at byte 50: leading zero in number");
    CHECK(relay_json_number("1e400", 5) == INFINITY);
    CHECK(relay_json_number("-1e400", 6) == -INFINITY);
    CHECK(relay_json_number("70", 2) == 70.0);
    CHECK(relay_json_number("70.0", 4) == 70.0);
    CHECK(relay_json_number("-0", 2) == 0.0 && signbit(relay_json_number("-0", 2)));
    CHECK(relay_json_number("37.80780792169409", 17) == 37.80780792169409);
    CHECK(relay_json_number("-122.42200352825247", 19) == -122.42200352825247);
    CHECK(relay_json_number("1.5e-3", 6) == 1.5e-3);
}


static void
test_utf8(void)
{
    CHECK_STR(WHY("{\"a\":\"\xc0\xaf\"}"), "invalid UTF-8 at byte 6");         /* overlong / */
    CHECK_STR(WHY("{\"a\":\"\xe0\x80\xaf\"}"), "invalid UTF-8 at byte 6");     /* overlong */
    CHECK_STR(WHY("{\"a\":\"\xf0\x80\x80\xaf\"}"), "invalid UTF-8 at byte 6"); /* overlong */
    CHECK_STR(WHY("{\"a\":\"\xed\xa0\x80\"}"), "invalid UTF-8 at byte 6");     /* U+D800 */
    CHECK_STR(WHY("{\"a\":\"\xed\xbf\xbf\"}"), "invalid UTF-8 at byte 6");     /* U+DFFF */
    CHECK_STR(WHY("{\"a\":\"\xf4\x90\x80\x80\"}"), "invalid UTF-8 at byte 6"); /* > U+10FFFF */
    CHECK_STR(WHY("{\"a\":\"\xf5\x80\x80\x80\"}"), "invalid UTF-8 at byte 6");
    CHECK_STR(WHY("{\"a\":\"\xff\"}"), "invalid UTF-8 at byte 6");
    CHECK_STR(WHY("{\"a\":\"\x80\"}"), "invalid UTF-8 at byte 6"); /* lone continuation */
    CHECK_STR(WHY("{\"a\":\"\xc3\"}"), "invalid UTF-8 at byte 6"); /* truncated */
    CHECK_STR(WHY("{\"a\":\"\xe2\x82\"}"), "invalid UTF-8 at byte 6");
    CHECK_STR(WHY("{\"a\":\"abcdefghijklmnopqrstuv\xe2\x82"), "invalid UTF-8 at byte 28");
    CHECK_STR(WHY("{\"\xc3\xa9\":1,\"\xc3\":1}"), "invalid UTF-8 at byte 9"); /* in a key */
    CHECK_STR(WHY("{\"a\":1}\xc3\xa9"), "invalid JSON at byte 7: unexpected data after the value");
    CHECK(valid("{\"a\":\"\xf4\x8f\xbf\xbf\"}")); /* U+10FFFF */
    CHECK(valid("{\"a\":\"\xef\xbf\xbf\xee\x80\x80\"}"));
}


static void
test_escapes_and_controls(void)
{
    /* Lone surrogates in \u escapes have no UTF-8 form: rejected. */
    CHECK_STR(WHY("{\"a\":\"\\ud800\"}"), "invalid JSON at byte 6: lone surrogate in \\u escape");
    CHECK_STR(WHY("{\"a\":\"\\udc00\"}"), "invalid JSON at byte 6: lone surrogate in \\u escape");
    CHECK_STR(WHY("{\"a\":\"\\ud800\\u0041\"}"), "invalid JSON at byte 6: lone surrogate in \\u escape");
    CHECK_STR(WHY("{\"a\":\"\\ud800x\"}"), "invalid JSON at byte 6: lone surrogate in \\u escape");
    CHECK_STR(WHY("{\"a\":\"x\ty\"}"), "invalid JSON at byte 7: control character in string");
    CHECK_STR(WHY("{\"a\":\"x\ny\"}"), "invalid JSON at byte 7: control character in string");
    CHECK_STR(WHY("{\"a\":\"x\0y\"}"), "invalid JSON at byte 7: control character in string");
    CHECK_STR(WHY("{\"a\":1}\0"), "invalid JSON at byte 7: unexpected data after the value");
    CHECK(valid("{\"a\":\"\x7f\"}")); /* DEL is not a control char in JSON */
}


/* {"a":[[...]]} with `arrays` arrays; returns the validation result. */
static int
nested(char *buf, size_t arrays)
{
    memcpy(buf, "{\"a\":", 5);
    memset(buf + 5, '[', arrays);
    memset(buf + 5 + arrays, ']', arrays);
    buf[5 + 2 * arrays] = '}';
    return relay_json_validate_object(buf, 6 + 2 * arrays, MAX, reason, sizeof(reason));
}


static void
test_limits(void)
{
    size_t n = 100000;
    char *deep = malloc(2 * n + 8);

    CHECK(relay_json_validate_object("{\"a\":1}", 7, 6, reason, sizeof(reason)) < 0);
    CHECK_STR(reason, "event too large (7 bytes > 6)");
    CHECK(relay_json_validate_object("{\"a\":1}", 7, 7, reason, sizeof(reason)) == 0);
    /* The size check comes first, before any byte is looked at. */
    CHECK(relay_json_validate_object("garbage", 7, 3, reason, sizeof(reason)) < 0);
    CHECK_STR(reason, "event too large (7 bytes > 3)");

    /* depth 512 is fine, 513 is not: the object plus 511 or 512 arrays */
    CHECK(nested(deep, 511) == 0);
    CHECK(nested(deep, 512) < 0);
    CHECK_STR(reason, "nesting deeper than 512");

    /* 100k-deep [[[...: rejected quickly, no recursion */
    deep[0] = '{';
    memcpy(deep + 1, "\"a\":", 4);
    memset(deep + 5, '[', n);
    CHECK(relay_json_validate_object(deep, n + 5, SIZE_MAX, reason, sizeof(reason)) < 0);
    CHECK_STR(reason, "nesting deeper than 512");
    free(deep);
}


static void
test_many_fields(void)
{
    size_t n = 100000, i, len = 1;
    char *text = malloc(n * 16 + 4);

    text[0] = '{';
    for (i = 0; i < n; i++) {
        len += (size_t)sprintf(text + len, "%s\"k%zu\":%zu", i ? "," : "", i, i);
    }
    text[len++] = '}';
    CHECK(relay_json_validate_object(text, len, SIZE_MAX, reason, sizeof(reason)) == 0);
    free(text);
}


static void
test_unescape(void)
{
    char out[64];
    const char *in = "caf\\u00e9 \\\"q\\\" \\ud83d\\ude00\\n\\/";
    size_t n = relay_json_unescape(in, strlen(in), out);

    CHECK(n == strlen("caf\xc3\xa9 \"q\" \xf0\x9f\x98\x80\n/"));
    CHECK(memcmp(out, "caf\xc3\xa9 \"q\" \xf0\x9f\x98\x80\n/", n) == 0);
    n = relay_json_unescape("\\u0000", 6, out);
    CHECK(n == 1 && out[0] == '\0');
}


/* ---- the block fast path must agree with the plain scanner ---- */

static const int levels[] = {
    RELAY_JSON_SIMD_PORTABLE,
    RELAY_JSON_SIMD_SSE2,
    RELAY_JSON_SIMD_AVX2,
    RELAY_JSON_SIMD_AVX512,
};
static long agree_cases;


/* Validate text at every level; every level must give the OFF result. */
static int
agree(const char *text, size_t len)
{
    char want[256], got[256];
    int rc, i, ok = 1;

    relay_json_set_simd(RELAY_JSON_SIMD_OFF);
    want[0] = '\0';
    rc = relay_json_validate_object(text, len, MAX, want, sizeof(want));
    for (i = 0; i < (int)(sizeof(levels) / sizeof(*levels)); i++) {
        got[0] = '\0';
        relay_json_set_simd(levels[i]);
        if (relay_json_validate_object(text, len, MAX, got, sizeof(got)) != rc || strcmp(got, want) != 0) {
            fprintf(stderr, "level %d disagrees on %.*s: \"%s\" vs \"%s\"\n", levels[i], (int)len, text, got, want);
            ok = 0;
        }
    }
    relay_json_set_simd(RELAY_JSON_SIMD_AUTO);
    agree_cases++;
    return ok;
}


#define AGREE(lit) CHECK(agree(lit, sizeof(lit) - 1))

static uint64_t rng_state = UINT64_C(0x9e3779b97f4a7c15);


static unsigned
rnd(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}


/* Append a random number-array value (mostly valid) of depth <= d. */
static size_t
gen_value(char *out, size_t at, size_t cap, int d)
{
    static const char *const nums[] = {
        "-122.48613717231817",
        "37.7608108830672",
        "0",
        "-0",
        "1",
        "10.5",
        "0.25",
        "123456789012345678901234567890",
        "-7",
        "3.0",
        "99",
    };
    unsigned n, i;

    if (at + 64 >= cap) {
        return at;
    }
    if (d == 0 || rnd(3) == 0) {
        const char *v = nums[rnd(sizeof(nums) / sizeof(*nums))];

        memcpy(out + at, v, strlen(v));
        return at + strlen(v);
    }
    out[at++] = '[';
    n = rnd(5);
    for (i = 0; i < n; i++) {
        if (i) {
            out[at++] = ',';
        }
        at = gen_value(out, at, cap, d - 1);
    }
    out[at++] = ']';
    return at;
}


/* Bytes the mutations plant: grammar-relevant ones, whitespace, controls,
 * bytes that are not UTF-8 and the start of a multi-byte sequence. */
static const unsigned char plant[] = {
    '0', '1',  '9',  '-',  '+',  '.',  ',',  '[',  ']',  '{',  '}',  '"',  ':',  'e',  'E',
    ' ', '\t', '\n', '\r', 0x00, 0x01, 0x1f, 0x7f, 0x80, 0xbf, 0xc3, 0xe2, 0xf0, 0xff, 'x',
};


/* {"type":"Polygon","coordinates":[[[...]]]} with k coordinate triples. */
static size_t
polygon(char *out, unsigned k)
{
    size_t n = (size_t)sprintf(out, "{\"type\":\"Polygon\",\"coordinates\":[[");
    unsigned i;

    for (i = 0; i < k; i++) {
        n += (size_t)sprintf(out + n, "%s[-122.%u,37.%u,0]", i ? "," : "", 486137 + i * 7919, 760810 + i * 104729);
    }
    n += (size_t)sprintf(out + n, "]]}");
    return n;
}


static void
test_block_crafted(void)
{
    char buf[4096], m[4096];
    size_t n, i, j;

    AGREE("{\"a\":[]}");
    AGREE("{\"a\":[[]]}");
    AGREE("{\"a\":[[],[]]}");
    AGREE("{\"a\":[[1,2],[],[3]],\"b\":[1,[2,[3]]]}");
    AGREE("{\"a\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27]}");
    AGREE("{\"a\":[[1.5,-2.25,0],[0.5,-0.5,0],[10,20,30],[1.125,2.5,3.75],[-0,0.0,-0.0],[7]]}");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[19,20]]");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[19,20]}");
    AGREE("[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[19,20],[21]]");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[19,20]],}");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[19,20]]]}");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[1.2.3]]}");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[01,2]]}");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[-01,2]]}");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[1e5,2]]}");
    AGREE("{\"a\":[[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12], [13, 14], [15, 16]]}");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[\"x\"]]}");
    AGREE("{\"a\":[[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[{}]]}");

    /* Every byte of a polygon replaced by every byte value, then every
     * truncation: invalid UTF-8 and controls land at every offset of a
     * 64-byte block, and on both sides of every cut. */
    n = polygon(buf, 12);
    for (i = 0; i < n; i++) {
        for (j = 0; j < 256; j++) {
            memcpy(m, buf, n);
            m[i] = (char)j;
            CHECK(agree(m, n));
        }
    }
    for (i = 0; i <= n; i++) {
        CHECK(agree(buf, i));
    }
    /* deleting or doubling each byte */
    for (i = 0; i < n; i++) {
        memcpy(m, buf, i);
        memcpy(m + i, buf + i + 1, n - i - 1);
        CHECK(agree(m, n - 1));
        memcpy(m, buf, i + 1);
        memcpy(m + i + 1, buf + i, n - i);
        CHECK(agree(m, n + 1));
    }
}


/* Sequences whose verdict depends on the bytes before them (a leading zero,
 * a second '.', a bracket after a value...), moved across every offset of
 * the first blocks by the number before them, and cut off by the input's
 * end: the block path must give the plain scanner's verdict wherever a block
 * boundary falls within them. */
static void
test_block_carries(void)
{
    static const char *const traps[] = {
        "-01",   "01",    "-0",    "0",     "1.2.3",  "1.25.5", "1.2",   "1..2", "-.5",  "1.,2",      "]1",
        "[],1",  "[-,1]", "1,,2",  "-]",    "[1]2",   "0.0.0",  "-0.5",  "10.0", "-",    "1.",        "1.e5",
        "[[1]]", "[[]]]", "1]]]]", "[[[[1", "2.50.5", "00",     "-1.01", ".5",   "[01]", "1.2,3.4.5",
    };
    char buf[512];
    size_t t, n;
    int digits;

    for (t = 0; t < sizeof(traps) / sizeof(*traps); t++) {
        for (digits = 1; digits < 140; digits++) {
            n = (size_t)sprintf(buf, "{\"a\":[%.*s,%s,7]}", digits,
                                "1111111111111111111111111111111111111111111111111111111111111111111111"
                                "1111111111111111111111111111111111111111111111111111111111111111111111",
                                traps[t]);
            CHECK(agree(buf, n));
            CHECK(agree(buf, n - 4)); /* the trap at the end of the input */
        }
    }
}


/* Numbers longer than a block: a block with no ',' at all, a fraction or a
 * leading zero whose digits run on across one or two block boundaries, and
 * then a trap, so that the verdict comes from blocks before the one that
 * fails, and the last proven ',' from the block before it or none. */
static void
test_block_long_runs(void)
{
    static const char *const tails[] = {"", ".5", "5", ".", "0", "-", "]", ",", "e1", "x", "]]", ",]"};
    static const char *const heads[] = {"1", "0", "-0", "-9", "1.", "0."};
    char buf[1024];
    size_t h, t, n;
    int len;

    for (h = 0; h < sizeof(heads) / sizeof(*heads); h++) {
        for (t = 0; t < sizeof(tails) / sizeof(*tails); t++) {
            for (len = 50; len < 200; len++) {
                n = (size_t)sprintf(buf, "{\"a\":[[5,6],[7,%s%.*s%s,8]]}", heads[h], len,
                                    "2222222222222222222222222222222222222222222222222222222222222222222222"
                                    "2222222222222222222222222222222222222222222222222222222222222222222222"
                                    "2222222222222222222222222222222222222222222222222222222222222222222222",
                                    tails[t]);
                CHECK(agree(buf, n));
                CHECK(agree(buf, n - 5)); /* cut off within the run or the trap */
            }
        }
    }
}


static void
test_block_random(void)
{
    char buf[2048];
    size_t n, k;
    int round, edits;

    for (round = 0; round < 40000; round++) {
        n = (size_t)sprintf(buf, "{\"k\":");
        n = gen_value(buf, n, sizeof(buf) - 8, 1 + (int)rnd(5));
        buf[n++] = '}';
        for (edits = (int)rnd(3); edits > 0; edits--) {
            k = rnd((unsigned)n);
            if (rnd(2)) {
                buf[k] = (char)plant[rnd(sizeof(plant))];
            } else {
                buf[k] = (char)("0123456789-.,[]"[rnd(15)]);
            }
        }
        CHECK(agree(buf, n));
    }
}


/* {"a": d arrays of numbers}: the depth limit cuts inside a block. */
static void
test_block_depth(void)
{
    size_t d, n, i;
    char *buf = malloc(8192);

    for (d = 500; d <= 515; d++) {
        n = 0;
        memcpy(buf, "{\"a\":", 5);
        n = 5;
        for (i = 0; i < d; i++) {
            memcpy(buf + n, "[1,", 3);
            n += 3;
        }
        for (i = 0; i < d; i++) {
            buf[n++] = ']';
        }
        buf[n++] = '}';
        CHECK(agree(buf, n));
    }
    /* d objects, then a list of numbers: the block path is asked to start
     * at the depth limit itself, where the list may not open. */
    for (d = 508; d <= 514; d++) {
        n = 0;
        for (i = 0; i < d; i++) {
            memcpy(buf + n, "{\"a\":", 5);
            n += 5;
        }
        n += (size_t)sprintf(buf + n, "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26]");
        for (i = 0; i < d; i++) {
            buf[n++] = '}';
        }
        CHECK(agree(buf, n));
    }
    free(buf);
}


/* A list of pairs under d arrays ({"a":[[...[[1.5,2],[3,4.25],...]...]]}):
 * most blocks count their brackets instead of following them (when no stop
 * can fall among them), so every block boundary lands at depths around the
 * base and the limit, with the list cut short or closed one bracket too
 * many or too few. */
static void
test_block_counted(void)
{
    size_t d, pairs, n, i;
    int extra;
    char *buf = malloc(16384);

    for (d = 1; d <= 513; d += d < 8 || d > 505 ? 1 : 97) {
        for (pairs = 1; pairs <= 12; pairs += 3) {
            for (extra = -1; extra <= 1; extra++) {
                n = (size_t)sprintf(buf, "{\"a\":");
                for (i = 0; i < d; i++) {
                    buf[n++] = '[';
                }
                for (i = 0; i < pairs; i++) {
                    n += (size_t)sprintf(buf + n, "%s[1.5,2],[3,4.25]", i ? "," : "");
                }
                for (i = 0; (int)i < (int)d + extra; i++) {
                    buf[n++] = ']';
                }
                buf[n++] = '}';
                CHECK(agree(buf, n));
                CHECK(agree(buf, n / 2));
            }
        }
    }
    free(buf);
}


/* The block path stops inside nested arrays (here at an exponent) and hands
 * the levels it opened to the scalar scanner, which must find them arrays
 * whatever the scanner's memory held: each check first validates objects
 * nested as deep, from this same frame, so that a level the block path left
 * unset would still say "object" and reject the valid list. */
static void
test_block_levels_resumed(void)
{
    static const char objects[] = "{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":1}}}}}";
    static const char lists[] = "{\"x\":[[[1.5,2.5],[3.5,4.5],[5.5,6.5],[7.5,8.5],[9.5,1e5]],[[1,2]]],\"y\":[1]}";
    char why[256];
    int i;

    for (i = 0; i < (int)(sizeof(levels) / sizeof(*levels)); i++) {
        relay_json_set_simd(RELAY_JSON_SIMD_OFF);
        CHECK(relay_json_validate_object(objects, sizeof(objects) - 1, MAX, why, sizeof(why)) == 0);
        relay_json_set_simd(levels[i]);
        CHECK(relay_json_validate_object(lists, sizeof(lists) - 1, MAX, why, sizeof(why)) == 0);
    }
    relay_json_set_simd(RELAY_JSON_SIMD_AUTO);
}


/* Numbers of every length around the scanner's 32-byte number window: a
 * '.' or 'e' right at the window's last byte once ended the number early,
 * rejecting valid JSON (found by the fuzzer). Every form must be valid at
 * every level, and a '.' without digits invalid. */
static void
test_number_window_lengths(void)
{
    static const char *const exps[] = {"", "e5", "E-12", "e+3"};
    char num[128], text[192], reason[256];
    int neg, ilen, flen, e, n;

    for (neg = 0; neg < 2; neg++) {
        for (ilen = 1; ilen <= 40; ilen++) {
            for (flen = 0; flen <= 40; flen++) {
                for (e = 0; e < 4; e++) {
                    n = 0;
                    if (neg) {
                        num[n++] = '-';
                    }
                    for (int i = 0; i < ilen; i++) {
                        num[n++] = (char)(i == 0 ? '1' + (ilen % 9) : '0' + (i * 7 + flen) % 10);
                    }
                    if (flen > 0) {
                        num[n++] = '.';
                        for (int i = 0; i < flen; i++) {
                            num[n++] = (char)('0' + (i * 3 + ilen) % 10);
                        }
                    }
                    n += snprintf(num + n, sizeof(num) - (size_t)n, "%s", exps[e]);
                    for (int shape = 0; shape < 2; shape++) {
                        int len = snprintf(text, sizeof(text), shape ? "{\"a\":[%.*s,1]}" : "{\"a\":%.*s}", n, num);
                        relay_json_set_simd(RELAY_JSON_SIMD_OFF);
                        if (relay_json_validate_object(text, (size_t)len, MAX, reason, sizeof(reason)) != 0) {
                            fprintf(stderr, "rejected valid %s: %s\n", text, reason);
                            CHECK(0);
                        }
                        CHECK(agree(text, (size_t)len));
                    }
                }
            }
            /* an integer part followed by a bare '.' is invalid at every length */
            n = snprintf(text, sizeof(text), "{\"a\":[%s%.*s.]}", neg ? "-" : "", ilen,
                         "1234567890123456789012345678901234567890");
            relay_json_set_simd(RELAY_JSON_SIMD_OFF);
            CHECK(relay_json_validate_object(text, (size_t)n, MAX, reason, sizeof(reason)) != 0);
            CHECK(agree(text, (size_t)n));
        }
    }
    relay_json_set_simd(RELAY_JSON_SIMD_AUTO);
}


/* A visitor that tracks every key of every object and writes down each
 * call, so two scans can be compared call for call. */
typedef struct transcript {
    char text[8192];
    size_t len;
    int32_t next;
} transcript;


static void
note_call(transcript *t, const char *what, int32_t id, const char *s, size_t len)
{
    int n = snprintf(t->text + t->len, sizeof(t->text) - t->len, "%s%d:%.*s;", what, id, (int)len, s);

    if (n > 0 && t->len + (size_t)n < sizeof(t->text)) {
        t->len += (size_t)n;
    }
}


static int32_t
on_key_note(void *ctx, int32_t object, const char *key, size_t len, int escaped)
{
    transcript *t = ctx;

    note_call(t, escaped ? "K\\" : "K", object, key, len);
    return ++t->next;
}


static void
on_scalar_note(void *ctx, int32_t slot, relay_json_type type, const char *text, size_t len, int escaped)
{
    char what[8];

    snprintf(what, sizeof(what), "S%d%s", (int)type, escaped ? "\\" : "");
    note_call(ctx, what, slot, text, len);
}


static int32_t
on_container_note(void *ctx, int32_t slot)
{
    transcript *t = ctx;

    note_call(t, "C", slot, "", 0);
    return ++t->next;
}


/* A visitor's key-length filter that lets through odd lengths and 8 only
 * (the scanner then calls on_key for those keys alone). */
static uint64_t
odd_key_lengths(void *ctx, int32_t object)
{
    (void)ctx;
    (void)object;
    return UINT64_C(0xaaaaaaaaaaaaaaaa) | UINT64_C(1) << 8;
}


/* Scan with the visitor (its key-length filter: key_lengths, or none) at
 * OFF and at every level: the same calls, the same verdict and reason. */
static int
agree_visited_with(const char *text, size_t len, uint64_t (*key_lengths)(void *, int32_t))
{
    static transcript want, got;
    relay_json_visitor v = {NULL, on_key_note, on_scalar_note, on_container_note, on_container_note, key_lengths};
    char want_reason[256], got_reason[256];
    int rc, i, ok = 1;

    relay_json_set_simd(RELAY_JSON_SIMD_OFF);
    memset(&want, 0, sizeof(want));
    v.ctx = &want;
    want_reason[0] = '\0';
    rc = relay_json_scan_object(text, len, MAX, &v, 0, want_reason, sizeof(want_reason));
    for (i = 0; i < (int)(sizeof(levels) / sizeof(*levels)); i++) {
        relay_json_set_simd(levels[i]);
        memset(&got, 0, sizeof(got));
        v.ctx = &got;
        got_reason[0] = '\0';
        if (relay_json_scan_object(text, len, MAX, &v, 0, got_reason, sizeof(got_reason)) != rc
            || strcmp(got_reason, want_reason) != 0 || got.len != want.len
            || memcmp(got.text, want.text, got.len) != 0) {
            fprintf(stderr, "level %d visits %.*s otherwise:\n%.*s\n%.*s\n", levels[i], (int)len, text, (int)got.len,
                    got.text, (int)want.len, want.text);
            ok = 0;
        }
    }
    relay_json_set_simd(RELAY_JSON_SIMD_AUTO);
    return ok;
}


static int
agree_visited(const char *text, size_t len)
{
    return agree_visited_with(text, len, NULL);
}


/* Every way of comparing the levels: plain validation, and visits with and
 * without a key-length filter. The text is scanned from a heap copy of its
 * exact size, so that a read past its end is an error under ASan. */
static int
agree_all(const char *text, size_t len)
{
    char *copy = malloc(len ? len : 1);
    int ok;

    if (copy == NULL) {
        return 0;
    }
    memcpy(copy, text, len);
    ok = agree(copy, len) && agree_visited(copy, len) && agree_visited_with(copy, len, odd_key_lengths);
    free(copy);
    return ok;
}


/* Objects of "key":"value" and "key":number pairs (the one-go pair path),
 * whole and with every byte of `plant` put at every position. */
static void
test_plain_pairs(void)
{
    static const char base[] =
        "{\"type\":\"Feature\",\"properties\":{\"MAPBLKLOT\":\"0001001\",\"n\":-12.5e3,"
        "\"BLOCK_NUM\":\"0001\", \"z\":0,\"LOT_NUM\":\"001\",\"e\":\"a\\u0041\",\"t\":true,"
        "\"STREET\":\"LARKIN STREET AND MORE\",\"ST_TYPE\":\"ST\"},\"geometry\":{\"type\":\"Polygon\","
        "\"coordinates\":[[[-122.5,37.8,0],[-122.4,37.7,0]]]}}";
    char text[sizeof(base) + 1];
    size_t len = sizeof(base) - 1, at, k;

    CHECK(valid(base));
    CHECK(agree(base, len) && agree_visited(base, len));
    for (at = 0; at < len; at++) {
        for (k = 0; k < sizeof(plant); k++) {
            memcpy(text, base, len);
            text[at] = (char)plant[k];
            CHECK(agree(text, len) && agree_visited(text, len));
            memcpy(text, base, at);
            text[at] = (char)plant[k];
            memcpy(text + at + 1, base + at, len - at);
            CHECK(agree(text, len + 1) && agree_visited(text, len + 1));
        }
    }
}


/* 70 digits: a value whose printed length (%.*s) moves what follows it. */
static const char digits70[] = "0123456789012345678901234567890123456789012345678901234567890123456789";


/* One pair for test_pair_runs: mostly plain "key":"value" of lengths on
 * both sides of the one-go pair path's limits (a key under 32 bytes; the
 * value's closing quote within the key's 32-byte window, else within the 16
 * bytes after the value's opening quote), sometimes a number, a nested
 * object, an escape, non-ASCII or whitespace. */
static size_t
gen_pair(char *out, size_t at)
{
    static const char *const odd[] = {
        "-12.5", "{\"a\":\"b\"}", "\"x\\ny\"", "\"caf\xc3\xa9\"", " \"sp\"", "\"\"", "[1,2]", "null",
    };
    unsigned klen = rnd(5) == 0 ? rnd(80) : rnd(36), vlen = rnd(5) == 0 ? rnd(80) : rnd(36), i;

    out[at++] = '"';
    for (i = 0; i < klen; i++) {
        out[at++] = (char)('A' + rnd(26));
    }
    out[at++] = '"';
    out[at++] = ':';
    if (rnd(6) == 0) {
        const char *v = odd[rnd(sizeof(odd) / sizeof(*odd))];

        memcpy(out + at, v, strlen(v));
        return at + strlen(v);
    }
    out[at++] = '"';
    for (i = 0; i < vlen; i++) {
        out[at++] = (char)('0' + rnd(10));
    }
    out[at++] = '"';
    return at;
}


/* Runs of pairs at every alignment, mixing the one-go pair path and the
 * general one: each object whole and with one planted byte, scanned alike at
 * every level, with and without a key-length filter (which decides for which
 * keys the visitor is called at all). */
static void
test_pair_runs(void)
{
    char text[4096];
    size_t len, at;
    unsigned round, n, i;

    for (round = 0; round < 3000; round++) {
        len = (size_t)sprintf(text, "{\"pad\":\"%.*s\",\"properties\":{", (int)(round % 70), digits70);
        n = 1 + rnd(14);
        for (i = 0; i < n && len < sizeof(text) - 400; i++) {
            if (i) {
                text[len++] = ',';
            }
            len = gen_pair(text, len);
        }
        len += (size_t)sprintf(text + len, "},\"z\":\"end\"}");
        CHECK(agree_all(text, len));
        if (round % 3 == 0) {
            at = rnd((unsigned)len);
            text[at] = (char)plant[rnd(sizeof(plant))];
            CHECK(agree_all(text, len));
        }
    }
    /* A long first value moves every later pair through each alignment. */
    for (i = 0; i < 64; i++) {
        len =
            (size_t)sprintf(text, "{\"k\":\"%.*s\",\"a\":\"b\",\"c\":\"d\",\"e\":\"f\",\"g\":\"h\"}", (int)i, digits70);
        CHECK(agree_all(text, len));
        len = (size_t)sprintf(text, "{\"q\":{\"k\":\"%.*s\"},\"a\":\"b\",\"c\":1,\"e\":\"f\",\"g\":\"h\"}", (int)i,
                              digits70);
        CHECK(agree_all(text, len));
    }
}


/* relay_json_scan_line: a line is settled only when it is a valid object
 * ending at a newline (blanks and CRs before it allowed), or at the end of
 * the text when that ends the last line; its length excludes the newline.
 * Anything else is left to the caller, whatever follows the line. */
static void
test_scan_line(void)
{
    static const struct {
        const char *text;
        int eol_at_end;
        long want; /* the length, or -1: not settled */
    } cases[] = {
        {"{\"a\":1}\n{\"b\":2}\n", 0, 7},
        {"{\"a\":1}\ngarbage", 0, 7},
        {"  {\"a\":[1,2.5,[3]]} \t\r\nx", 0, 22},
        {"{}", 1, 2},
        {"{}", 0, -1},
        {"{} ", 1, 3},
        {"{\"a\":1} x\n", 0, -1},
        {"{\"a\":1}}\n", 0, -1},
        {"{\"a\":\n1}\n", 0, -1},
        {"{\"a\":1\n}", 1, -1},
        {"{\"s\":\"x\ny\"}\n", 0, -1},
        {"\n{}\n", 0, -1},
        {"[1]\n", 0, -1},
        {"{\"a\":", 1, -1},
        {"", 1, -1},
    };
    size_t i, len;
    long got;

    for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        len = 12345;
        got = relay_json_scan_line(cases[i].text, strlen(cases[i].text), cases[i].eol_at_end, NULL, -1, &len) == 0
                  ? (long)len
                  : -1;
        if (got != cases[i].want) {
            fprintf(stderr, "scan_line(\"%s\", %d): %ld, want %ld\n", cases[i].text, cases[i].eol_at_end, got,
                    cases[i].want);
        }
        CHECK(got == cases[i].want);
    }
}


int
main(void)
{
    test_valid();
    test_invalid_json();
    test_numbers();
    test_number_window_lengths();
    test_utf8();
    test_escapes_and_controls();
    test_limits();
    test_many_fields();
    test_unescape();
    test_block_crafted();
    test_block_carries();
    test_block_long_runs();
    test_block_random();
    test_block_depth();
    test_block_counted();
    test_block_levels_resumed();
    test_plain_pairs();
    test_pair_runs();
    test_scan_line();
    printf("%ld texts compared across levels\n", agree_cases);
    CHECK_DONE();
}
