/* Unit tests for the strict JSON scanner (include/relay/json_scan.h). */
#include "check.h"
#include "relay/json_scan.h"

#include <math.h>

#define MAX (1u << 20)

static char reason[256];


static int
valid(const char *text)
{
    return relay_json_validate_object(text, strlen(text), MAX, reason, sizeof reason) == 0;
}


/* The reason for an invalid text, or "" when it was valid. */
static const char *
why(const char *text, size_t len)
{
    if (relay_json_validate_object(text, len, MAX, reason, sizeof reason) == 0)
        return "";
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
    CHECK(valid("{\"a\":1,\"a\":2}"));  /* duplicates are valid; last wins later */
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
    CHECK_STR(WHY("{\"a\":\"\xc0\xaf\"}"), "invalid UTF-8 at byte 6");          /* overlong / */
    CHECK_STR(WHY("{\"a\":\"\xe0\x80\xaf\"}"), "invalid UTF-8 at byte 6");      /* overlong */
    CHECK_STR(WHY("{\"a\":\"\xf0\x80\x80\xaf\"}"), "invalid UTF-8 at byte 6");  /* overlong */
    CHECK_STR(WHY("{\"a\":\"\xed\xa0\x80\"}"), "invalid UTF-8 at byte 6");      /* U+D800 */
    CHECK_STR(WHY("{\"a\":\"\xed\xbf\xbf\"}"), "invalid UTF-8 at byte 6");      /* U+DFFF */
    CHECK_STR(WHY("{\"a\":\"\xf4\x90\x80\x80\"}"), "invalid UTF-8 at byte 6");  /* > U+10FFFF */
    CHECK_STR(WHY("{\"a\":\"\xf5\x80\x80\x80\"}"), "invalid UTF-8 at byte 6");
    CHECK_STR(WHY("{\"a\":\"\xff\"}"), "invalid UTF-8 at byte 6");
    CHECK_STR(WHY("{\"a\":\"\x80\"}"), "invalid UTF-8 at byte 6");              /* lone continuation */
    CHECK_STR(WHY("{\"a\":\"\xc3\"}"), "invalid UTF-8 at byte 6");              /* truncated */
    CHECK_STR(WHY("{\"a\":\"\xe2\x82\"}"), "invalid UTF-8 at byte 6");
    CHECK_STR(WHY("{\"a\":\"abcdefghijklmnopqrstuv\xe2\x82"), "invalid UTF-8 at byte 28");
    CHECK_STR(WHY("{\"\xc3\xa9\":1,\"\xc3\":1}"), "invalid UTF-8 at byte 9");  /* in a key */
    CHECK_STR(WHY("{\"a\":1}\xc3\xa9"), "invalid JSON at byte 7: unexpected data after the value");
    CHECK(valid("{\"a\":\"\xf4\x8f\xbf\xbf\"}"));                                 /* U+10FFFF */
    CHECK(valid("{\"a\":\"\xef\xbf\xbf\xee\x80\x80\"}"));
}


static void
test_escapes_and_controls(void)
{
    /* Lone surrogates in \u escapes have no UTF-8 form: rejected. */
    CHECK_STR(WHY("{\"a\":\"\\ud800\"}"), "invalid JSON at byte 6: lone surrogate in \\u escape");
    CHECK_STR(WHY("{\"a\":\"\\udc00\"}"), "invalid JSON at byte 6: lone surrogate in \\u escape");
    CHECK_STR(WHY("{\"a\":\"\\ud800\\u0041\"}"),
              "invalid JSON at byte 6: lone surrogate in \\u escape");
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
    return relay_json_validate_object(buf, 6 + 2 * arrays, MAX, reason, sizeof reason);
}


static void
test_limits(void)
{
    size_t n = 100000;
    char *deep = malloc(2 * n + 8);

    CHECK(relay_json_validate_object("{\"a\":1}", 7, 6, reason, sizeof reason) < 0);
    CHECK_STR(reason, "event too large (7 bytes > 6)");
    CHECK(relay_json_validate_object("{\"a\":1}", 7, 7, reason, sizeof reason) == 0);
    /* The size check comes first, before any byte is looked at. */
    CHECK(relay_json_validate_object("garbage", 7, 3, reason, sizeof reason) < 0);
    CHECK_STR(reason, "event too large (7 bytes > 3)");

    /* depth 512 is fine, 513 is not: the object plus 511 or 512 arrays */
    CHECK(nested(deep, 511) == 0);
    CHECK(nested(deep, 512) < 0);
    CHECK_STR(reason, "nesting deeper than 512");

    /* 100k-deep [[[...: rejected quickly, no recursion */
    deep[0] = '{';
    memcpy(deep + 1, "\"a\":", 4);
    memset(deep + 5, '[', n);
    CHECK(relay_json_validate_object(deep, n + 5, SIZE_MAX, reason, sizeof reason) < 0);
    CHECK_STR(reason, "nesting deeper than 512");
    free(deep);
}


static void
test_many_fields(void)
{
    size_t n = 100000, i, len = 1;
    char *text = malloc(n * 16 + 4);

    text[0] = '{';
    for (i = 0; i < n; i++)
        len += (size_t)sprintf(text + len, "%s\"k%zu\":%zu", i ? "," : "", i, i);
    text[len++] = '}';
    CHECK(relay_json_validate_object(text, len, SIZE_MAX, reason, sizeof reason) == 0);
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


int
main(void)
{
    test_valid();
    test_invalid_json();
    test_numbers();
    test_utf8();
    test_escapes_and_controls();
    test_limits();
    test_many_fields();
    test_unescape();
    CHECK_DONE();
}
