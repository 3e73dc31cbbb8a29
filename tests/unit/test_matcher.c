/* Unit tests for the compiled matcher (include/relay/matcher.h). */
#include "check.h"
#include "relay/json_scan.h"
#include "relay/matcher.h"

#include <stdint.h>
#include <stdlib.h>

#define MAX (1u << 20)
/* 2026-01-01T00:00:00Z */
#define NOW INT64_C(1767225600000)

static char text[512];


/* Matching ids of `event` against one-rule-or-more matcher m, as "0,2", or
 * "!reason" when malformed. */
static const char *
ids_of(relay_matcher *m, const char *event)
{
    uint32_t ids[64];
    char reason[200];
    int n = relay_matcher_match(m, event, strlen(event), MAX, NOW, ids, 64, reason, sizeof(reason));
    size_t len = 0;
    int i;

    if (n < 0) {
        snprintf(text, sizeof(text), "!%s", reason);
        return text;
    }
    text[0] = '\0';
    for (i = 0; i < n && i < 64; i++) {
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%u", i ? "," : "", ids[i]);
    }
    return text;
}


static relay_matcher *
make(const char *const *rules, size_t n)
{
    relay_matcher *m = relay_matcher_new();
    char err[200];
    size_t i;

    for (i = 0; i < n; i++) {
        CHECK(relay_matcher_add(m, rules[i], strlen(rules[i]), err, sizeof(err)) == (int)i);
    }
    CHECK(relay_matcher_compile(m, err, sizeof(err)) == 0);
    return m;
}


/* Does the single rule match the event? 1, 0, or -1 when malformed. */
static int
one(const char *rule, const char *event)
{
    relay_matcher *m = make(&rule, 1);
    const char *r = ids_of(m, event);
    int result = r[0] == '!' ? -1 : r[0] == '0';

    relay_matcher_free(m);
    return result;
}


static void
test_typed_equality(void)
{
    const char *r70 = "{\"n\":[{\"eq\":70}]}";

    CHECK(one(r70, "{\"n\":70}") == 1);
    CHECK(one(r70, "{\"n\":70.0}") == 1);
    CHECK(one(r70, "{\"n\":7e1}") == 1);
    CHECK(one(r70, "{\"n\":\"70\"}") == 0);
    CHECK(one("{\"n\":[{\"eq\":\"70\"}]}", "{\"n\":70}") == 0);
    CHECK(one("{\"b\":[{\"eq\":true}]}", "{\"b\":true}") == 1);
    CHECK(one("{\"b\":[{\"eq\":true}]}", "{\"b\":\"true\"}") == 0);
    CHECK(one("{\"b\":[{\"eq\":true}]}", "{\"b\":1}") == 0);
    CHECK(one("{\"b\":[{\"eq\":false}]}", "{\"b\":false}") == 1);
    CHECK(one("{\"b\":[{\"eq\":null}]}", "{\"b\":null}") == 1);
    CHECK(one("{\"b\":[{\"eq\":null}]}", "{}") == 0);
    CHECK(one("{\"b\":[{\"eq\":null}]}", "{\"b\":\"null\"}") == 0);
    CHECK(one("{\"s\":[{\"eq\":\"caf\xc3\xa9\"}]}", "{\"s\":\"caf\\u00e9\"}") == 1);
    CHECK(one("{\"s\":[{\"eq\":\"caf\\u00e9\"}]}", "{\"s\":\"caf\xc3\xa9\"}") == 1);
    CHECK(one("{\"s\":[{\"eq\":\"a\\\"b\"}]}", "{\"s\":\"a\\\"b\"}") == 1);
    CHECK(one("{\"s\":[{\"eq\":\"ab\"}]}", "{\"s\":\"abc\"}") == 0);
    CHECK(one("{\"z\":[{\"eq\":0}]}", "{\"z\":-0}") == 1);
    CHECK(one("{\"z\":[{\"eq\":-0.0}]}", "{\"z\":0}") == 1);
    CHECK(one("{\"z\":[{\"eq\":1e400}]}", "{\"z\":1e999}") == 1);
    /* keys with escapes, on both sides */
    CHECK(one("{\"k\\u00e9\":[{\"eq\":1}]}", "{\"k\xc3\xa9\":1}") == 1);
    CHECK(one("{\"k\xc3\xa9\":[{\"eq\":1}]}", "{\"k\\u00e9\":1}") == 1);
    /* field names that look like operators are plain keys */
    CHECK(one("{\"eq\":[{\"eq\":\"group\"}],\"group\":[{\"exists\":true}]}", "{\"eq\":\"group\",\"group\":0}") == 1);
}


static void
test_prefix_suffix(void)
{
    CHECK(one("{\"s\":[{\"prefix\":\"\"}]}", "{\"s\":\"\"}") == 1);
    CHECK(one("{\"s\":[{\"prefix\":\"\"}]}", "{\"s\":\"x\"}") == 1);
    CHECK(one("{\"s\":[{\"prefix\":\"\"}]}", "{\"s\":1}") == 0);
    CHECK(one("{\"s\":[{\"prefix\":\"\"}]}", "{\"s\":null}") == 0);
    CHECK(one("{\"s\":[{\"prefix\":\"\"}]}", "{}") == 0);
    CHECK(one("{\"s\":[{\"prefix\":\"user_\"}]}", "{\"s\":\"user_123\"}") == 1);
    CHECK(one("{\"s\":[{\"prefix\":\"user_\"}]}", "{\"s\":\"123\"}") == 0);
    CHECK(one("{\"s\":[{\"prefix\":\"user_\"}]}", "{\"s\":\"user\"}") == 0);
    CHECK(one("{\"s\":[{\"suffix\":\"ST\"}]}", "{\"s\":\"MAIN ST\"}") == 1);
    CHECK(one("{\"s\":[{\"suffix\":\"ST\"}]}", "{\"s\":\"T\"}") == 0);
    CHECK(one("{\"s\":[{\"suffix\":\"1\"}]}", "{\"s\":1}") == 0);
    CHECK(one("{\"s\":[{\"suffix\":\"\xc3\xa9\"}]}", "{\"s\":\"caf\\u00e9\"}") == 1);
    CHECK(one("{\"s\":[{\"prefix\":\"a\"},{\"prefix\":\"bc\"}]}", "{\"s\":\"bcd\"}") == 1);
}


static void
test_exists(void)
{
    const char *top_t = "{\"k\":[{\"exists\":true}]}", *top_f = "{\"k\":[{\"exists\":false}]}";
    const char *nest_t = "{\"p\":[{\"group\":{\"k\":[{\"exists\":true}]}}]}";
    const char *nest_f = "{\"p\":[{\"group\":{\"k\":[{\"exists\":false}]}}]}";
    const char *present[] = {"null", "false", "0", "\"\"", "{}", "[]"};
    char event[64];
    size_t i;

    for (i = 0; i < sizeof(present) / sizeof(*present); i++) {
        snprintf(event, sizeof(event), "{\"k\":%s}", present[i]);
        CHECK(one(top_t, event) == 1);
        CHECK(one(top_f, event) == 0);
    }
    CHECK(one(top_t, "{}") == 0);
    CHECK(one(top_f, "{}") == 1);
    CHECK(one(nest_t, "{\"p\":{\"k\":null}}") == 1);
    CHECK(one(nest_f, "{\"p\":{\"k\":null}}") == 0);
    CHECK(one(nest_t, "{}") == 0); /* missing parent */
    CHECK(one(nest_f, "{}") == 1);
    CHECK(one(nest_f, "{\"p\":null}") == 1); /* non-object parent */
    CHECK(one(nest_f, "{\"p\":\"s\"}") == 1);
    CHECK(one(nest_t, "{\"p\":\"s\"}") == 0);
    CHECK(one(nest_t, "{\"p\":[{\"x\":1},{\"k\":1}]}") == 1); /* array parent: an element */
    CHECK(one(nest_f, "{\"p\":[{\"k\":1},{\"x\":1}]}") == 1);
    CHECK(one(nest_f, "{\"p\":[{\"k\":1}]}") == 0);
    CHECK(one(nest_f, "{\"p\":[{\"k\":1},7]}") == 1); /* non-object element acts as {} */
    CHECK(one(nest_f, "{\"p\":[]}") == 0);            /* no element at all */
    CHECK(one(top_t, "{\"k\":[]}") == 1);             /* exists is about the key */
    CHECK(one(top_f, "{\"x\":{\"k\":1}}") == 1);
}


static void
test_arrays(void)
{
    const char *eq = "{\"t\":[{\"eq\":\"b\"}]}";
    const char *both = "{\"p\":[{\"group\":{\"a\":[{\"eq\":1}],\"b\":[{\"eq\":2}]}}]}";

    CHECK(one(eq, "{\"t\":[\"a\",\"b\"]}") == 1);
    CHECK(one(eq, "{\"t\":[\"a\",[\"c\",[\"b\"]]]}") == 1);
    CHECK(one(eq, "{\"t\":[\"a\",{\"t\":\"b\"}]}") == 0);
    CHECK(one(eq, "{\"t\":[]}") == 0);
    CHECK(one(both, "{\"p\":[{\"a\":1},{\"b\":2}]}") == 0); /* never across elements */
    CHECK(one(both, "{\"p\":[{\"a\":1},{\"a\":1,\"b\":2}]}") == 1);
    CHECK(one(both, "{\"p\":[[{\"a\":1,\"b\":2}]]}") == 1);
    CHECK(one(both, "{\"p\":{\"a\":[0,1],\"b\":[2]}}") == 1);
    CHECK(one("{\"c\":[{\"eq\":37.5}]}", "{\"c\":[[[-122.1,37.5,0]]]}") == 1);
    CHECK(one("{\"c\":[{\"eq\":37.5}]}", "{\"c\":[[[-122.1,37.50001,0]]]}") == 0);
    CHECK(one("{\"c\":[{\"gt\":100}]}", "{\"c\":[1,[2,[300]]]}") == 1);
}


static void
test_thresholds(void)
{
    CHECK(one("{\"n\":[{\"gt\":70}]}", "{\"n\":70.5}") == 1);
    CHECK(one("{\"n\":[{\"gt\":70}]}", "{\"n\":70}") == 0);
    CHECK(one("{\"n\":[{\"gte\":70}]}", "{\"n\":70}") == 1);
    CHECK(one("{\"n\":[{\"lt\":70}]}", "{\"n\":-1e400}") == 1);
    CHECK(one("{\"n\":[{\"lte\":-1}]}", "{\"n\":-1}") == 1);
    CHECK(one("{\"n\":[{\"gt\":1e308}]}", "{\"n\":1e400}") == 1);
    CHECK(one("{\"n\":[{\"gt\":70}]}", "{\"n\":\"80\"}") == 0);
    CHECK(one("{\"n\":[{\"gt\":70}]}", "{\"n\":null}") == 0);
    CHECK(one("{\"n\":[{\"gt\":70}]}", "{}") == 0);
    CHECK(one("{\"n\":[{\"gte\":0}]}", "{\"n\":-0}") == 1);
    CHECK(one("{\"n\":[{\"lt\":0}]}", "{\"n\":-0}") == 0);
    CHECK(one("{\"n\":[{\"lt\":10},{\"gte\":1000}]}", "{\"n\":5000}") == 1);
    CHECK(one("{\"n\":[{\"lt\":10},{\"gte\":1000}]}", "{\"n\":500}") == 0);
}


static void
test_temporal(void)
{
    const char *recent = "{\"t\":[{\"gt\":{\"now\":-300000}}]}"; /* after now-5m */
    const char *past = "{\"t\":[{\"lt\":{\"now\":0}}]}";
    const char *at = "{\"t\":[{\"gte\":{\"now\":0}}]}";

    CHECK(one(recent, "{\"t\":\"2025-12-31T23:59:00Z\"}") == 1);
    CHECK(one(recent, "{\"t\":\"2025-12-31T23:50:00Z\"}") == 0);
    CHECK(one(recent, "{\"t\":\"2025-12-31t23:59:00z\"}") == 1);
    CHECK(one(recent, "{\"t\":\"2026-01-01T00:59:00+01:00\"}") == 1); /* = 23:59Z */
    CHECK(one(recent, "{\"t\":\"2025-12-31T18:59:00-05:00\"}") == 1);
    CHECK(one(recent, "{\"t\":\"2026-01-01T00:50:00+01:00\"}") == 0);
    CHECK(one(at, "{\"t\":\"2026-01-01T00:00:00Z\"}") == 1);
    CHECK(one(past, "{\"t\":\"2026-01-01T00:00:00Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-12-31T23:59:59.999Z\"}") == 1);
    CHECK(one(past, "{\"t\":\"2025-12-31T23:59:59.9999999999Z\"}") == 1);
    CHECK(one(at, "{\"t\":\"2025-12-31T23:59:59.9999999999Z\"}") == 0);
    CHECK(one(at, "{\"t\":\"2026-01-01T00:00:00.0000000001Z\"}") == 1);
    CHECK(one("{\"t\":[{\"gt\":{\"now\":0}}]}", "{\"t\":\"2026-01-01T00:00:00.0000000001Z\"}") == 1);
    CHECK(one("{\"t\":[{\"gt\":{\"now\":0}}]}", "{\"t\":\"2026-01-01T00:00:00.000Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2024-02-29T12:00:00Z\"}") == 1); /* leap year */
    CHECK(one(past, "{\"t\":\"2023-02-29T12:00:00Z\"}") == 0); /* not a leap year */
    CHECK(one(past, "{\"t\":\"1900-02-29T12:00:00Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2000-02-29T12:00:00Z\"}") == 1);
    CHECK(one(past, "{\"t\":\"2016-12-31T23:59:60Z\"}") == 1); /* leap second */
    CHECK(one(past, "{\"t\":\"2025-13-01T00:00:00Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-04-31T00:00:00Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-01-01T24:00:00Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-01-01T00:60:00Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-01-01T00:00:61Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-01-01 00:00:00Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-01-01T00:00:00\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-01-01T00:00:00.Z\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-01-01T00:00:00+0100\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-01-01T00:00:00+24:00\"}") == 0);
    CHECK(one(past, "{\"t\":\"2025-01-01T00:00:00Zjunk\"}") == 0);
    CHECK(one(past, "{\"t\":1}") == 0);
    CHECK(one(past, "{\"t\":null}") == 0);
    CHECK(one(past, "{}") == 0);
    CHECK(one(past, "{\"t\":[\"x\",\"2020-01-01T00:00:00Z\"]}") == 1);
}


static void
test_combinations(void)
{
    const char *rules[] = {
        "{\"a\":[{\"eq\":\"x\"},{\"eq\":\"y\"}],\"b\":[{\"eq\":1}]}",
        "{\"a\":[{\"prefix\":\"x\"}]}",
        "{\"c\":[{\"exists\":false}]}",
        "{\"p\":[{\"group\":{\"q\":[{\"eq\":true}]}},{\"group\":{\"r\":[{\"eq\":false}]}}]}",
        "{\"a\":[{\"eq\":\"x\"}]}",
    };
    relay_matcher *m = make(rules, 5);
    uint32_t ids[2];
    char reason[64];
    const char *e = "{\"a\":\"x\",\"b\":1}";

    CHECK_STR(ids_of(m, e), "0,1,2,4");
    CHECK_STR(ids_of(m, "{\"a\":\"y\",\"b\":1,\"c\":0}"), "0");
    CHECK_STR(ids_of(m, "{\"a\":\"y\",\"b\":2,\"c\":0}"), "");
    CHECK_STR(ids_of(m, "{\"c\":0,\"p\":{\"r\":false}}"), "3");
    CHECK_STR(ids_of(m, "{\"c\":0,\"p\":[{\"q\":false},{\"q\":true}]}"), "3");
    CHECK_STR(ids_of(m, "{\"c\":0,\"p\":{\"q\":false,\"r\":true}}"), "");
    /* duplicate keys: the last one wins, for values and for presence */
    CHECK_STR(ids_of(m, "{\"a\":\"x\",\"b\":1,\"a\":\"z\"}"), "2");
    CHECK_STR(ids_of(m, "{\"a\":\"z\",\"b\":1,\"a\":\"y\"}"), "0,2");
    CHECK_STR(ids_of(m, "{\"p\":{\"q\":true},\"p\":{\"q\":false},\"c\":1}"), "");
    /* a small ids buffer: the total count (ids written: without copies, the first) */
    CHECK(relay_matcher_match(m, e, strlen(e), MAX, NOW, ids, 2, reason, sizeof(reason)) == 4);
    CHECK(ids[0] == 0 && ids[1] == 1);
    CHECK_STR(ids_of(m, "{\"a\":"), "!invalid JSON at byte 5: expected a value");
    CHECK_STR(ids_of(m, "[]"), "!event is not a JSON object");
    CHECK(relay_matcher_match(m, e, strlen(e), 4, NOW, ids, 2, reason, sizeof(reason)) == -1);
    CHECK_STR(reason, "event too large (15 bytes > 4)");
    CHECK(relay_matcher_count(m) == 5);
    relay_matcher_free(m);
}


/* Rules of the same text are one evaluation that reports every copy, in
 * ascending order among the other rules; a copy of a failed rule fails too. */
static void
test_identical_rules(void)
{
    const char *x = "{\"a\":[{\"eq\":\"x\"}]}", *bad = "{\"a\":[{\"bogus\":1}]}";
    const char *rules[] = {x, "{\"a\":[{\"prefix\":\"x\"}]}", x, "{\"b\":[{\"exists\":true}]}", x};
    relay_matcher *m = make(rules, 5);
    uint32_t ids[2];
    char reason[64], err[200];
    const char *e = "{\"a\":\"x\",\"b\":1}";

    CHECK_STR(ids_of(m, e), "0,1,2,3,4");
    CHECK_STR(ids_of(m, "{\"a\":\"xy\"}"), "1");
    CHECK_STR(ids_of(m, "{\"b\":0}"), "3");
    CHECK(relay_matcher_match(m, e, strlen(e), MAX, NOW, ids, 2, reason, sizeof(reason)) == 5);
    CHECK(relay_matcher_add(m, bad, strlen(bad), err, sizeof(err)) == -1);
    CHECK(relay_matcher_add(m, bad, strlen(bad), err, sizeof(err)) == -1);
    CHECK(relay_matcher_add(m, x, strlen(x), err, sizeof(err)) == 5);
    CHECK(relay_matcher_compile(m, err, sizeof(err)) == 0);
    CHECK_STR(ids_of(m, e), "0,1,2,3,4,5");
    CHECK(relay_matcher_count(m) == 6);
    relay_matcher_free(m);
}


/* Field and operator names may be escaped: they mean what they spell, and a
 * field spelled both ways is one field. */
static void
test_escaped_names(void)
{
    const char *rules[] = {
        "{\"a\":[{\"eq\":1}]}",
        "{\"\\u0061\":[{\"\\u0065q\":2}]}",
        "{\"b\\\"\":[{\"eq\":3}]}",
        "{\"a\":[{\"\\u0070refix\":\"x\"}]}",
    };
    const char *unknown = "{\"a\":[{\"\\u0065x\":1}]}";
    relay_matcher *m = make(rules, 4);
    char err[200];

    CHECK_STR(ids_of(m, "{\"a\":1}"), "0");
    CHECK_STR(ids_of(m, "{\"\\u0061\":2}"), "1");
    CHECK_STR(ids_of(m, "{\"b\\\"\":3}"), "2");
    CHECK_STR(ids_of(m, "{\"a\":\"xy\"}"), "3");
    CHECK(relay_matcher_add(m, unknown, strlen(unknown), err, sizeof(err)) == -1);
    CHECK(strstr(err, "unknown operator") != NULL);
    CHECK_STR(ids_of(m, "{\"a\":2,\"b\\\"\":3}"), "1,2");
    relay_matcher_free(m);
}


/* A block's rules: room made for them first, added without validation,
 * numbered and matched as rules added one by one. */
static void
test_reserved_block(void)
{
    const char *x = "{\"a\":[{\"eq\":\"x\"}]}", *y = "{\"b\":[{\"group\":{\"c\":[{\"prefix\":\"y\"}]}}]}";
    relay_matcher *m = relay_matcher_new();
    char err[200];

    int i;

    CHECK(relay_matcher_add(m, x, strlen(x), err, sizeof(err)) == 0);
    CHECK(relay_matcher_reserve(m, 3, err, sizeof(err)) == 0);
    CHECK(relay_matcher_add_compiled(m, y, strlen(y), err, sizeof(err)) == 1);
    CHECK(relay_matcher_add_compiled(m, x, strlen(x), err, sizeof(err)) == 2);
    CHECK(relay_matcher_add_compiled(m, y, strlen(y), err, sizeof(err)) == 3);
    for (i = 4; i < 40; i++) { /* past the room made, which is rounded up */
        CHECK(relay_matcher_add(m, x, strlen(x), err, sizeof(err)) == i);
    }
    CHECK(relay_matcher_reserve(m, SIZE_MAX, err, sizeof(err)) == -1);
    CHECK(strstr(err, "too many rules") != NULL);
    CHECK(relay_matcher_count(m) == 40);
    CHECK_STR(ids_of(m, "{\"b\":{\"c\":\"y\"}}"), "1,3");
    CHECK(relay_matcher_add_compiled(m, y, strlen(y), err, sizeof(err)) == 40);
    CHECK_STR(ids_of(m, "{\"b\":{\"c\":\"yz\"}}"), "1,3,40");
    CHECK(strncmp(ids_of(m, "{\"a\":\"x\"}"), "0,2,4,5,6,", 10) == 0);
    relay_matcher_free(m);
}


static void
test_compile_errors(void)
{
    const char *bad[] = {
        "",
        "[]",
        "{}",
        "{\"a\":[]}",
        "{\"a\":{}}",
        "{\"a\":[{}]}",
        "{\"a\":[1]}",
        "{\"a\":[{\"eq\":[1]}]}",
        "{\"a\":[{\"eq\":{}}]}",
        "{\"a\":[{\"prefx\":\"x\"}]}",
        "{\"a\":[{\"prefix\":1}]}",
        "{\"a\":[{\"exists\":1}]}",
        "{\"a\":[{\"gt\":\"x\"}]}",
        "{\"a\":[{\"gt\":{\"now\":1.5}}]}",
        "{\"a\":[{\"gt\":{\"then\":1}}]}",
        "{\"a\":[{\"eq\":1,\"prefix\":\"x\"}]}",
        "{\"a\":[{\"group\":{}}]}",
        "{\"a\":[{\"group\":[]}]}",
        "{\"a\":[{\"eq\":1}]",
        "{\"a\":[{\"eq\\u0000\":1}]}",
    };
    relay_matcher *m = relay_matcher_new();
    char err[200];
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        err[0] = '\0';
        CHECK(relay_matcher_add(m, bad[i], strlen(bad[i]), err, sizeof(err)) == -1);
        CHECK(err[0] != '\0');
    }
    CHECK(relay_matcher_add(m, "{\"a\":[{\"eq\":1}]}", 16, err, sizeof(err)) == 0);
    CHECK_STR(ids_of(m, "{\"a\":1}"), "0");
    /* adding after a match recompiles */
    CHECK(relay_matcher_add(m, "{\"b\":[{\"eq\":2}]}", 16, err, sizeof(err)) == 1);
    CHECK_STR(ids_of(m, "{\"a\":1,\"b\":2}"), "0,1");
    relay_matcher_free(m);
}


static void
test_many_rules(void)
{
    relay_matcher *m = relay_matcher_new();
    char rule[128], err[200], event[128];
    int i;

    for (i = 0; i < 10000; i++) {
        int len = snprintf(rule, sizeof(rule), "{\"p\":[{\"group\":{\"id\":[{\"eq\":\"k%d\"}]}}]}", i % 5000);

        CHECK(relay_matcher_add(m, rule, (size_t)len, err, sizeof(err)) == i);
    }
    snprintf(event, sizeof(event), "{\"p\":{\"id\":\"k42\"}}");
    CHECK_STR(ids_of(m, event), "42,5042");
    CHECK_STR(ids_of(m, "{\"p\":{\"id\":[\"k7\",\"k4999\",\"k7\"]}}"), "7,4999,5007,9999");
    CHECK_STR(ids_of(m, "{\"p\":{\"id\":\"k5000\"}}"), "");
    /* Every key of the 10k-entry index is found, and near misses are not:
     * each probe chain of the tagged table is walked. */
    for (i = 0; i < 6000; i++) {
        char want[32];

        snprintf(event, sizeof(event), "{\"p\":{\"id\":\"k%d\"}}", i);
        if (i < 5000) {
            snprintf(want, sizeof(want), "%d,%d", i, i + 5000);
        } else {
            want[0] = '\0';
        }
        CHECK_STR(ids_of(m, event), want);
        snprintf(event, sizeof(event), "{\"p\":{\"id\":\"K%d\"}}", i);
        CHECK_STR(ids_of(m, event), "");
    }
    relay_matcher_free(m);
}


/* A large index is looked up once an event is scanned (matcher_index.c):
 * numbers, strings (escaped ones too), prefixes and literals found early in a
 * long event, before thousands of other values at the same nodes (more than
 * are ever held back at once, and enough that the state's arrays move),
 * still make their rules candidates. */
static void
test_deferred_lookups(void)
{
    enum { N = 3000, EVENT = 64 * 1024 };
    relay_matcher *m = relay_matcher_new();
    char rule[128], err[200], *event = malloc(EVENT);
    size_t len = 0;
    int i;

    CHECK(event != NULL);
    if (event == NULL) {
        return;
    }
    for (i = 0; i < N; i++) {
        int n = i % 3 == 0   ? snprintf(rule, sizeof(rule), "{\"n\":[{\"eq\":%d.5}]}", i)
                : i % 3 == 1 ? snprintf(rule, sizeof(rule), "{\"s\":[{\"eq\":\"long string number %d\"}]}", i)
                             : snprintf(rule, sizeof(rule), "{\"p\":[{\"prefix\":\"x%d-\"}]}", i);

        CHECK(relay_matcher_add(m, rule, (size_t)n, err, sizeof(err)) == i);
    }
    CHECK(relay_matcher_add(m, "{\"t\":[{\"eq\":true}]}", 19, err, sizeof(err)) == N);
    len += (size_t)snprintf(event + len, EVENT - len, "{\"p\":\"x2-y\",\"n\":[2997.5");
    for (i = 0; i < 2000; i++) {
        len += (size_t)snprintf(event + len, EVENT - len, ",%d", i);
    }
    len += (size_t)snprintf(event + len, EVENT - len, ",3.5],\"s\":[");
    for (i = 0; i < 2000; i++) {
        len += (size_t)snprintf(event + len, EVENT - len, "\"v%d\",", i);
    }
    snprintf(event + len, EVENT - len, "\"long string \\u006eumber 1000\"],\"t\":true}");
    CHECK_STR(ids_of(m, event), "2,3,1000,2997,3000");
    CHECK_STR(ids_of(m, "{\"n\":1.5,\"p\":\"x20-\",\"s\":\"long string number 4\"}"), "4,20");
    CHECK_STR(ids_of(m, "{\"n\":0.5}"), "0");
    CHECK_STR(ids_of(m, "{\"n\":1,\"s\":\"long string number 3\"}"), "");
    free(event);
    relay_matcher_free(m);
}


/* Untracked arrays of numbers take the scanner's block fast path; tracked
 * ones must still report every number, and both must reject bad bytes
 * with the plain scanner's reason. */
static void
test_number_arrays(void)
{
    static const char *const rules[] = {
        "{\"properties\":[{\"group\":{\"id\":[{\"eq\":\"a\"}]}}]}",
        "{\"geometry\":[{\"group\":{\"coordinates\":[{\"eq\":37.5}]}}]}",
    };
    static const char ring[] = "[[-122.48613717231817,37.7608108830672,0],[-122.48620965739097,37.761165805915034,0],"
                               "[-122.48607163261062,37.76116134348771,0],[-122.4858737552294,37.761154945988416,0]]";
    relay_matcher *m = make(rules, 2);
    char event[1024];
    int level;

    for (level = RELAY_JSON_SIMD_OFF; level <= RELAY_JSON_SIMD_AVX512; level++) {
        relay_json_set_simd(level);
        snprintf(event, sizeof(event), "{\"g\":%s,\"properties\":{\"id\":\"a\"},\"h\":%s}", ring, ring);
        CHECK_STR(ids_of(m, event), "0");
        snprintf(event, sizeof(event), "{\"geometry\":{\"coordinates\":[%s,[[1,37.5]]]}}", ring);
        CHECK_STR(ids_of(m, event), "1");
        snprintf(event, sizeof(event), "{\"g\":[%s,[[1,037.5]]],\"properties\":{\"id\":\"a\"}}", ring);
        CHECK_STR(ids_of(m, event), "!invalid JSON at byte 181: leading zero in number");
        snprintf(event, sizeof(event), "{\"g\":[%s,[[1,3\x80]]],\"properties\":{\"id\":\"a\"}}", ring);
        CHECK_STR(ids_of(m, event), "!invalid JSON at byte 181: expected ',' or ']'");
    }
    relay_json_set_simd(RELAY_JSON_SIMD_AUTO);
    relay_matcher_free(m);
}


/* The operator table: every row is reachable by name, and the rule reader
 * accepts exactly the rows that are not foreign, each with its operand. */
static void
test_operator_table(void)
{
    static const char *const samples[] = {
        [RELAY_OPERAND_LITERAL] = "1",
        [RELAY_OPERAND_STRING] = "\"x\"",
        [RELAY_OPERAND_BOOLEAN] = "true",
        [RELAY_OPERAND_THRESHOLD] = "{\"now\":-5}",
        [RELAY_OPERAND_GROUP] = "{\"b\":[{\"eq\":1}]}",
        [RELAY_OPERAND_FOREIGN] = "1",
    };
    const relay_matcher_op *op;
    relay_matcher *m = relay_matcher_new();
    char rule[128], err[200];
    int rows = 0, written = 0, foreign = 0;

    for (op = relay_matcher_ops; op->name != NULL; op++, rows++) {
        CHECK(strlen(op->name) == op->len);
        CHECK(relay_matcher_op_find(op->name, op->len) == op);
        CHECK(strcmp(relay_matcher_operand_name((relay_matcher_operand)op->operand), "") != 0);
        written += op->written;
        foreign += op->operand == RELAY_OPERAND_FOREIGN;
        snprintf(rule, sizeof(rule), "{\"a\":[{\"%s\":%s}]}", op->name, samples[op->operand]);
        if (op->operand == RELAY_OPERAND_FOREIGN) {
            CHECK(relay_matcher_add(m, rule, strlen(rule), err, sizeof(err)) == -1);
            CHECK(strstr(err, "unknown operator") != NULL);
        } else {
            CHECK(relay_matcher_add(m, rule, strlen(rule), err, sizeof(err)) >= 0);
        }
    }
    CHECK(rows == 15 && written == 7 && foreign == 6);
    CHECK(relay_matcher_op_find("gt", 2) != NULL && relay_matcher_op_find("gt", 1) == NULL);
    CHECK(relay_matcher_op_find("gte", 3)->operand == RELAY_OPERAND_THRESHOLD);
    CHECK(relay_matcher_op_find("equals", 6) == NULL);
    CHECK_STR(relay_matcher_operand_name(RELAY_OPERAND_THRESHOLD), "threshold");
    relay_matcher_free(m);
}


/* Equality-only number nodes match on estimates (matcher_numbers.c): every
 * text must match exactly when its correctly rounded value equals the
 * literal, including texts that round onto it from far past the 17th digit,
 * exponents, underflow to 0 and -0, and a node that also compares. */
static void
test_number_estimates(void)
{
    static const char *const texts[] = {
        "37.80780792169409",
        "37.807807921694090000001",
        "3.780780792169409e1",
        "3780780792169409E-14",
        "37.80780792169410",
        "37.8078079216940",
        "-37.80780792169409",
        "37.807807921694089999999999999",
        "0",
        "-0",
        "0.0e5",
        "1e-400",
        "-1E-400",
        "1e400",
        "122.51487372361257",
        "-122.51487372361257",
        "0.1",
        "1e-1",
        "100000000000000000000000",
        "1e23",
        "123456789012345678901234567890",
        "1.2345678901234567890123e29",
        "5e-324",
        "2.2250738585072014e-308",
        "9007199254740993",
        "9007199254740992",
        "0.30000000000000004",
        "0.3",
        "1e22",
        "1e280",
        "1e-280",
        "1e281",
    };
    static const char *const literals[] = {
        "37.80780792169409",    "0", "-122.51487372361257", "0.3", "1e23", "9007199254740992", "1e-280", "5e-324",
        "1.2345678901234568e29"};
    char rule[256], event[256];
    size_t i, j;

    for (i = 0; i < sizeof(literals) / sizeof(*literals); i++) {
        const char *lit = literals[i];
        double want_value = strtod(lit, NULL);
        relay_matcher *eq, *both;
        const char *eq_rule[1], *both_rules[2];
        char both_rule[256];

        snprintf(rule, sizeof(rule), "{\"c\":[{\"eq\":%s},{\"eq\":7}]}", lit);
        snprintf(both_rule, sizeof(both_rule), "{\"c\":[{\"gt\":1e300}]}");
        eq_rule[0] = rule;
        both_rules[0] = rule;
        both_rules[1] = both_rule;
        eq = make(eq_rule, 1);
        both = make(both_rules, 2);
        for (j = 0; j < sizeof(texts) / sizeof(*texts); j++) {
            double value = strtod(texts[j], NULL);
            int want = value == want_value || value == 7;

            snprintf(event, sizeof(event), "{\"c\":[1,%s,2]}", texts[j]);
            CHECK_STR(ids_of(eq, event), want ? "0" : "");
            CHECK_STR(ids_of(both, event), want ? (value > 1e300 ? "0,1" : "0") : (value > 1e300 ? "1" : ""));
            if (strcmp(ids_of(eq, event), want ? "0" : "") != 0) {
                fprintf(stderr, "  literal %s, text %s\n", lit, texts[j]);
            }
        }
        relay_matcher_free(eq);
        relay_matcher_free(both);
    }
}


/* An object's keys are compared directly while it has few tracked children
 * and hashed beyond that: lookups must agree either side of the switch,
 * including keys that differ only in their last byte or length. */
static void
test_few_and_many_children(void)
{
    static const char *const keys[] = {"ab", "ac", "abc", "b", "abd", "ab\\u0000"};
    char event[128], want[24];
    const char *rules[6];
    static char texts[6][128];
    size_t n, i;

    for (n = 1; n <= 6; n++) {
        relay_matcher *m;

        for (i = 0; i < n; i++) {
            snprintf(texts[i], sizeof(texts[i]), "{\"o\":[{\"group\":{\"%s\":[{\"eq\":1}]}}]}", keys[i]);
            rules[i] = texts[i];
        }
        m = make(rules, n);
        for (i = 0; i < 6; i++) {
            snprintf(event, sizeof(event), "{\"o\":{\"zz\":1,\"%s\":1,\"a\":1}}", keys[i]);
            snprintf(want, sizeof(want), "%zu", i);
            CHECK_STR(ids_of(m, event), i < n ? want : "");
        }
        relay_matcher_free(m);
    }
}


/* Ids through relay_matcher_match_with, as ids_of formats them. */
static const char *
ids_with(const relay_matcher *m, relay_match_state *st, const char *event)
{
    uint32_t ids[64];
    char reason[200];
    int n = relay_matcher_match_with(m, st, event, strlen(event), MAX, NOW, ids, 64, reason, sizeof(reason));
    size_t len = 0;
    int i;

    if (n < 0) {
        snprintf(text, sizeof(text), "!%s", reason);
        return text;
    }
    text[0] = '\0';
    for (i = 0; i < n && i < 64; i++) {
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%u", i ? "," : "", ids[i]);
    }
    return text;
}


/* States keep per-event scratch apart: interleaved events on two states give
 * what one state gives, one state serves two matchers (its candidate stamps
 * start over), and an uncompiled matcher is refused rather than built under a
 * reader's feet. */
static void
test_states(void)
{
    static const char *const rules[] = {"{\"a\":[{\"eq\":1}]}", "{\"a\":[{\"eq\":1}],\"b\":[{\"eq\":2}]}",
                                        "{\"c\":[{\"prefix\":\"x\"}]}"};
    static const char *const other_rules[] = {"{\"c\":[{\"eq\":\"xy\"}]}"};
    relay_matcher *m = make(rules, 3), *other = make(other_rules, 1), *fresh = relay_matcher_new();
    relay_match_state *one_st = relay_match_state_new(), *two_st = relay_match_state_new();
    char err[200];
    int i;

    CHECK(one_st != NULL && two_st != NULL && fresh != NULL);
    for (i = 0; i < 3; i++) {
        CHECK_STR(ids_with(m, one_st, "{\"a\":1,\"b\":2}"), "0,1");
        CHECK_STR(ids_with(m, two_st, "{\"c\":\"xy\",\"a\":1}"), "0,2");
        CHECK_STR(ids_with(other, one_st, "{\"c\":\"xy\",\"a\":1}"), "0");
        CHECK_STR(ids_with(m, one_st, "{\"c\":\"xy\",\"a\":1}"), "0,2");
    }
    CHECK_STR(ids_with(m, two_st, "{\"a\":"), "!invalid JSON at byte 5: expected a value");
    CHECK(relay_matcher_add(fresh, rules[0], strlen(rules[0]), err, sizeof(err)) == 0);
    CHECK_STR(ids_with(fresh, one_st, "{\"a\":1}"), "!matcher not compiled");
    CHECK(relay_matcher_compile(fresh, err, sizeof(err)) == 0);
    CHECK_STR(ids_with(fresh, one_st, "{\"a\":1}"), "0");
    relay_match_state_free(one_st);
    relay_match_state_free(two_st);
    relay_match_state_free(NULL);
    relay_matcher_free(m);
    relay_matcher_free(other);
    relay_matcher_free(fresh);
}


/* relay_matcher_match_line settles what relay_matcher_match_with would
 * report for the line up to its newline, and leaves a line to the caller
 * when it is malformed, too large or has more matches than ids holds. */
static void
test_match_line(void)
{
    static const char *const rules[] = {"{\"a\":[{\"eq\":1}]}", "{\"b\":[{\"exists\":true}]}", "{\"a\":[{\"gt\":0}]}"};
    relay_matcher *m = make(rules, 3);
    relay_match_state *st = relay_match_state_new();
    const char *two = "{\"a\":1,\"b\":0}\n{\"a\":2}\n";
    uint32_t ids[4];
    size_t len = 0;

    CHECK(st != NULL);
    CHECK(relay_matcher_match_line(m, st, two, strlen(two), 0, 64, 0, ids, 4, &len) == 3);
    CHECK(len == 13 && ids[0] == 0 && ids[1] == 1 && ids[2] == 2);
    CHECK(relay_matcher_match_line(m, st, two + 14, strlen(two) - 14, 0, 64, 0, ids, 4, &len) == 1);
    CHECK(len == 7 && ids[0] == 2);
    CHECK(relay_matcher_match_line(m, st, "{\"c\":1}", 7, 1, 64, 0, ids, 4, &len) == 0 && len == 7);
    /* left to the caller */
    CHECK(relay_matcher_match_line(m, st, two, strlen(two), 0, 64, 0, ids, 2, &len) == -1);
    CHECK(relay_matcher_match_line(m, st, two, strlen(two), 0, 12, 0, ids, 4, &len) == -1);
    CHECK(relay_matcher_match_line(m, st, "{\"a\":1} {}\n", 11, 0, 64, 0, ids, 4, &len) == -1);
    CHECK(relay_matcher_match_line(m, st, "{\"a\":1}", 7, 0, 64, 0, ids, 4, &len) == -1);
    /* exactly the limit is accepted, as by relay_matcher_match_with */
    CHECK(relay_matcher_match_line(m, st, two, strlen(two), 0, 13, 0, ids, 4, &len) == 3 && len == 13);
    relay_match_state_free(st);
    relay_matcher_free(m);
}


int
main(void)
{
    test_states();
    test_few_and_many_children();
    test_number_estimates();
    test_operator_table();
    test_typed_equality();
    test_prefix_suffix();
    test_exists();
    test_arrays();
    test_thresholds();
    test_temporal();
    test_combinations();
    test_identical_rules();
    test_escaped_names();
    test_reserved_block();
    test_compile_errors();
    test_many_rules();
    test_deferred_lookups();
    test_number_arrays();
    test_match_line();
    CHECK_DONE();
}
