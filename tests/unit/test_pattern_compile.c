/* Unit test of pattern_compile: the accepted subset comes out as pattern.lua's normal
 * form, and everything outside it is deferred (-1), never compiled differently. */
#include "check.h"
#include "relay/matcher.h"
#include "relay/pattern_compile.h"

static char err[RELAY_YAML_ERR_MAX];
static relay_pattern_buf buf;


static relay_yaml_node *
parse(const char *text)
{
    relay_yaml_node *root = NULL;

    if (relay_yaml_parse(text, strlen(text), &root, err, sizeof(err)) != 0) {
        fprintf(stderr, "unexpected parse error for %s: %s\n", text, err);
    }
    CHECK(root != NULL);
    return root;
}


/* Compile a pattern given as YAML; the JSON, or NULL when deferred. The result lives in
 * buf until the next call. */
static const char *
compile(const char *yaml)
{
    relay_yaml_node *root = parse(yaml);
    int rc;

    if (root == NULL) {
        return NULL;
    }
    rc = relay_pattern_compile(root, &buf);
    relay_yaml_free(root);
    if (rc != 0) {
        return NULL;
    }
    CHECK(strlen(buf.data) == buf.len);
    return buf.data;
}


#define CHECK_DEFER(yaml) CHECK(compile(yaml) == NULL)


static void
test_literals(void)
{
    CHECK_STR(compile("{a: [x]}"), "{\"a\":[{\"eq\":\"x\"}]}");
    CHECK_STR(compile("{a: [x, 1, -1.5, null, true, \"2\", !!str 3]}"),
              "{\"a\":[{\"eq\":\"x\"},{\"eq\":1},{\"eq\":-1.5},{\"eq\":null},{\"eq\":true},"
              "{\"eq\":\"2\"},{\"eq\":\"3\"}]}");
    CHECK_STR(compile("{a: [0x1F, 0o17, 0.1, 1e300]}"),
              "{\"a\":[{\"eq\":31},{\"eq\":15},{\"eq\":0.1},{\"eq\":1e+300}]}");
    CHECK_STR(compile("{a: [\"q\\\"b\\\\s\\t\\x01\\x7f\"]}"), "{\"a\":[{\"eq\":\"q\\\"b\\\\s\\t\\u0001\\u007f\"}]}");
    CHECK_STR(compile("{\"k\\\"ey\": [x], b: [y]}"), "{\"k\\\"ey\":[{\"eq\":\"x\"}],\"b\":[{\"eq\":\"y\"}]}");
}


static void
test_operators(void)
{
    CHECK_STR(compile("{a: [{prefix: ab}]}"), "{\"a\":[{\"prefix\":\"ab\"}]}");
    CHECK_STR(compile("{a: [{suffix: \"z\"}]}"), "{\"a\":[{\"suffix\":\"z\"}]}");
    CHECK_STR(compile("{a: [{exists: true}], b: [{exists: false}]}"),
              "{\"a\":[{\"exists\":true}],\"b\":[{\"exists\":false}]}");
    CHECK_STR(compile("{a: [{gt: 0}, {gte: -2.5}, {lt: 1e3}, {lte: 0x10}]}"),
              "{\"a\":[{\"gt\":0},{\"gte\":-2.5},{\"lt\":1000},{\"lte\":16}]}");
    CHECK_STR(compile("{a: [x, {prefix: p}]}"), "{\"a\":[{\"eq\":\"x\"},{\"prefix\":\"p\"}]}");
}


static void
test_groups(void)
{
    /* A map where a list is expected stands for a one-element list. */
    CHECK_STR(compile("{a: {b: [x]}}"), "{\"a\":[{\"group\":{\"b\":[{\"eq\":\"x\"}]}}]}");
    CHECK_STR(compile("{a: {prefix: x}}"), "{\"a\":[{\"prefix\":\"x\"}]}");
    CHECK_STR(compile("{a: {b: {c: {d: [1]}}}}"),
              "{\"a\":[{\"group\":{\"b\":[{\"group\":{\"c\":[{\"group\":{\"d\":[{\"eq\":1}]}}]}}]}}]}");
    CHECK_STR(compile("{a: [{b: [x], c: [{exists: false}]}]}"),
              "{\"a\":[{\"group\":{\"b\":[{\"eq\":\"x\"}],\"c\":[{\"exists\":false}]}}]}");
}


static void
test_deferred(void)
{
    /* now() operands and other non-numeric comparisons: pattern.lua parses those. */
    CHECK_DEFER("{a: [{gt: \"now()-5m\"}]}");
    CHECK_DEFER("{a: [{lt: now()}]}");
    CHECK_DEFER("{a: [{gt: \"2020-01-01\"}]}");
    /* Scalar or missing conditions, empty lists and maps. */
    CHECK_DEFER("{a: x}");
    CHECK_DEFER("{a: null}");
    CHECK_DEFER("{a: []}");
    CHECK_DEFER("{a: [[x]]}");
    CHECK_DEFER("{a: [{}]}");
    CHECK_DEFER("{}");
    CHECK_DEFER("[a]");
    CHECK_DEFER("x");
    /* Operand types and non-finite numbers. */
    CHECK_DEFER("{a: [{prefix: 1}]}");
    CHECK_DEFER("{a: [{prefix: null}]}");
    CHECK_DEFER("{a: [{prefix: [a, b]}]}");
    CHECK_DEFER("{a: [{exists: yes}]}");
    CHECK_DEFER("{a: [{gt: .inf}]}");
    CHECK_DEFER("{a: [-.inf]}");
    CHECK_DEFER("{a: [.nan]}");
    /* Unknown, misspelt, mixed or foreign keys. */
    CHECK_DEFER("{a: [{prefx: a}]}");
    CHECK_DEFER("{a: [{eq: 1}]}");
    CHECK_DEFER("{a: [{prefix: a, suffix: b}]}");
    CHECK_DEFER("{a: [{b: [x], prefix: y}]}");
    CHECK_DEFER("{a: [{b: [x], cidr: [y]}]}");
    CHECK_DEFER("{a: [{anything-but: x}]}");
    CHECK_DEFER("{numeric: [1]}");
    CHECK_DEFER("{prefix: [x]}");
    CHECK_DEFER("{$or: [x]}");
    /* Two keys that are the same text (the YAML layer allows "1" and 1). */
    CHECK_DEFER("{\"1\": [x], 1: [y]}");
}


static void
test_field_limit(void)
{
    char yaml[2048];
    size_t n = 0;
    int i;

    n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "{");
    for (i = 0; i < RELAY_PATTERN_MAX_FIELDS; i++) {
        n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "%sf%d: [x]", i ? ", " : "", i);
    }
    CHECK(compile(strcat(yaml, "}")) != NULL);
    yaml[n] = '\0';
    CHECK_DEFER(strcat(yaml, ", extra: [x]}"));
}


/* Compile an entry given as YAML; 0 or -1, with *e pointing into *root (caller frees). */
static int
compile_entry(const char *yaml, relay_yaml_node **root, relay_pattern_entry *e)
{
    *root = parse(yaml);
    if (*root == NULL) {
        return -1;
    }
    return relay_pattern_compile_entry(*root, e, &buf);
}


static void
test_entries(void)
{
    static const char *const deferred[] = {
        "{pattern: {a: [x]}}",                       /* no handler */
        "{handler: h}",                              /* no pattern */
        "{handler: h, pattern: {a: [x]}, other: 1}", /* unknown key */
        "{handler: 1, pattern: {a: [x]}}",           /* handler not a string */
        "{handler: a b, pattern: {a: [x]}}",         /* bad handler name */
        "{handler: \"\", pattern: {a: [x]}}",        /* empty handler */
        "{handler: [h], pattern: {a: [x]}}",         /* handler not a scalar */
        "{handler: h, pattern: {a: x}}",             /* pattern deferred */
        "{handler: h, pattern: [a]}",                /* pattern not a map */
        "[handler, pattern]",                        /* entry not a map */
        NULL,
    };
    relay_yaml_node *root;
    relay_pattern_entry e;
    int i;

    CHECK(compile_entry("{pattern: {a: [1]}, handler: \"h.x-1_y\"}", &root, &e) == 0);
    CHECK_STR(buf.data, "{\"a\":[{\"eq\":1}]}");
    CHECK(e.handler != NULL && e.handler->len == 7 && memcmp(e.handler->text, "h.x-1_y", 7) == 0);
    CHECK(e.handler->line == 1 && e.handler->col == 30);
    CHECK(e.pattern == relay_yaml_map_value(root, 0));
    CHECK(e.timeout == NULL && e.retries == NULL);
    relay_yaml_free(root);

    CHECK(compile_entry("handler: h\npattern: {a: [x]}\ntimeout: 5s\nretries: 2\n", &root, &e) == 0);
    CHECK(e.timeout != NULL && e.timeout->kind == RELAY_YAML_SCALAR && strcmp(e.timeout->text, "5s") == 0);
    CHECK(e.retries != NULL && strcmp(e.retries->text, "2") == 0);
    relay_yaml_free(root);

    for (i = 0; deferred[i] != NULL; i++) {
        int rc = compile_entry(deferred[i], &root, &e);
        if (rc != -1) {
            fprintf(stderr, "not deferred: %s\n", deferred[i]);
        }
        CHECK(rc == -1);
        relay_yaml_free(root);
    }
}


/* Every written operator of the matcher's table compiles, and every written or
 * foreign one is refused as a field name, with no list of names here. */
static void
test_operator_table(void)
{
    static const char *const samples[][2] = {
        [RELAY_OPERAND_STRING] = {"ab", "\"ab\""},
        [RELAY_OPERAND_BOOLEAN] = {"false", "false"},
        [RELAY_OPERAND_THRESHOLD] = {"-2.5", "-2.5"},
    };
    const relay_matcher_op *op;
    char yaml[128], want[128];

    for (op = relay_matcher_ops; op->name != NULL; op++) {
        snprintf(yaml, sizeof(yaml), "{\"%s\": [x]}", op->name);
        if (op->written || op->operand == RELAY_OPERAND_FOREIGN) {
            CHECK_DEFER(yaml);
        } else {
            snprintf(want, sizeof(want), "{\"%s\":[{\"eq\":\"x\"}]}", op->name);
            CHECK_STR(compile(yaml), want);
        }
        if (!op->written) {
            continue;
        }
        snprintf(yaml, sizeof(yaml), "{a: [{%s: %s}]}", op->name, samples[op->operand][0]);
        snprintf(want, sizeof(want), "{\"a\":[{\"%s\":%s}]}", op->name, samples[op->operand][1]);
        CHECK_STR(compile(yaml), want);
    }
}


int
main(void)
{
    test_operator_table();
    test_literals();
    test_operators();
    test_groups();
    test_deferred();
    test_field_limit();
    test_entries();
    relay_pattern_buf_free(&buf);
    CHECK(buf.data == NULL && buf.len == 0 && buf.cap == 0);
    relay_pattern_buf_free(&buf);
    CHECK_DONE();
}
