/* Unit test of the C YAML layer: marks, core schema, duplicate keys, aliases, tags,
 * multi-document input, bad UTF-8 and bounded nesting. */
#include "check.h"
#include "relay/yaml_doc.h"

#include <math.h>

static char err[RELAY_YAML_ERR_MAX];


static relay_yaml_node *
parse_ok(const char *text)
{
    relay_yaml_node *root = NULL;
    int rc = relay_yaml_parse(text, strlen(text), &root, err, sizeof(err));

    if (rc != 0) {
        fprintf(stderr, "unexpected parse error for %s: %s\n", text, err);
    }
    CHECK(rc == 0);
    return root;
}


/* Parse expecting failure; return the error text. */
static const char *
parse_err(const char *text, size_t len)
{
    relay_yaml_node *root = (relay_yaml_node *)1;
    int rc = relay_yaml_parse(text, len, &root, err, sizeof(err));

    CHECK(rc == -1);
    CHECK(root == NULL);
    return err;
}


static void
test_marks(void)
{
    relay_yaml_node *root = parse_ok("a: 1\nb:\n  - x\n  - {c: d}\nlong_key:   \"q\"\n");
    relay_yaml_node *seq, *flow;

    CHECK(root != NULL && root->kind == RELAY_YAML_MAP && root->count == 3);
    CHECK(root->line == 1 && root->col == 1);
    CHECK(relay_yaml_map_key(root, 0)->line == 1 && relay_yaml_map_key(root, 0)->col == 1);
    CHECK(relay_yaml_map_value(root, 0)->line == 1 && relay_yaml_map_value(root, 0)->col == 4);
    seq = relay_yaml_map_value(root, 1);
    CHECK(seq->kind == RELAY_YAML_SEQ && seq->count == 2);
    CHECK(seq->line == 3 && seq->col == 3);
    CHECK(seq->items[0]->line == 3 && seq->items[0]->col == 5);
    CHECK_STR(seq->items[0]->text, "x");
    flow = seq->items[1];
    CHECK(flow->kind == RELAY_YAML_MAP && flow->line == 4 && flow->col == 5);
    CHECK(relay_yaml_map_key(flow, 0)->line == 4 && relay_yaml_map_key(flow, 0)->col == 6);
    CHECK(relay_yaml_map_value(root, 2)->line == 5 && relay_yaml_map_value(root, 2)->col == 13);
    CHECK(relay_yaml_map_value(root, 2)->quoted);
    relay_yaml_free(root);

    /* Columns count characters, not bytes. */
    root = parse_ok("\"\xc3\xa9\xc3\xa9\": x\n");
    CHECK(relay_yaml_map_value(root, 0)->col == 7);
    relay_yaml_free(root);
}


static void
expect_type(const char *text, relay_yaml_type type, double number)
{
    relay_yaml_node *root = parse_ok(text);
    relay_yaml_value v;

    CHECK(root != NULL && root->kind == RELAY_YAML_SCALAR);
    if (root == NULL) {
        return;
    }
    relay_yaml_resolve(root, &v);
    if (v.type != type) {
        fprintf(stderr, "%s: type %d, want %d\n", text, (int)v.type, (int)type);
    }
    CHECK(v.type == type);
    if (type == RELAY_YAML_INT || (type == RELAY_YAML_FLOAT && !isnan(number))) {
        CHECK(v.number == number);
    }
    if (type == RELAY_YAML_BOOL) {
        CHECK(v.boolean == (number != 0));
    }
    relay_yaml_free(root);
}


static void
test_core_schema(void)
{
    relay_yaml_node *root;
    relay_yaml_value v;

    expect_type("null", RELAY_YAML_NULL, 0);
    expect_type("Null", RELAY_YAML_NULL, 0);
    expect_type("NULL", RELAY_YAML_NULL, 0);
    expect_type("~", RELAY_YAML_NULL, 0);
    expect_type("nULL", RELAY_YAML_STR, 0);
    expect_type("true", RELAY_YAML_BOOL, 1);
    expect_type("True", RELAY_YAML_BOOL, 1);
    expect_type("TRUE", RELAY_YAML_BOOL, 1);
    expect_type("false", RELAY_YAML_BOOL, 0);
    expect_type("FALSE", RELAY_YAML_BOOL, 0);
    expect_type("tRUE", RELAY_YAML_STR, 0);
    expect_type("yes", RELAY_YAML_STR, 0);
    expect_type("no", RELAY_YAML_STR, 0);
    expect_type("ON", RELAY_YAML_STR, 0);
    expect_type("off", RELAY_YAML_STR, 0);
    expect_type("y", RELAY_YAML_STR, 0);
    expect_type("0", RELAY_YAML_INT, 0);
    expect_type("-17", RELAY_YAML_INT, -17);
    expect_type("+17", RELAY_YAML_INT, 17);
    expect_type("0o17", RELAY_YAML_INT, 15);
    expect_type("0x1F", RELAY_YAML_INT, 31);
    expect_type("0xff", RELAY_YAML_INT, 255);
    expect_type("0o8", RELAY_YAML_STR, 0);
    expect_type("0x", RELAY_YAML_STR, 0);
    expect_type("017", RELAY_YAML_INT, 17);  /* 1.2: no implicit octal */
    expect_type("1_000", RELAY_YAML_STR, 0); /* 1.2 core: no underscores */
    expect_type("9007199254740993", RELAY_YAML_INT, 9007199254740992.0);
    expect_type("1.5", RELAY_YAML_FLOAT, 1.5);
    expect_type("-.5", RELAY_YAML_FLOAT, -0.5);
    expect_type("1.", RELAY_YAML_FLOAT, 1.0);
    expect_type("1e3", RELAY_YAML_FLOAT, 1000);
    expect_type("2.5E-1", RELAY_YAML_FLOAT, 0.25);
    expect_type("1e", RELAY_YAML_STR, 0);
    expect_type(".", RELAY_YAML_STR, 0);
    expect_type(".inf", RELAY_YAML_FLOAT, HUGE_VAL);
    expect_type("-.Inf", RELAY_YAML_FLOAT, -HUGE_VAL);
    expect_type("+.INF", RELAY_YAML_FLOAT, HUGE_VAL);
    expect_type(".nan", RELAY_YAML_FLOAT, NAN);
    expect_type(".NaN", RELAY_YAML_FLOAT, NAN);
    expect_type("-.nan", RELAY_YAML_STR, 0);
    expect_type("2026-09-12T10:00:00Z", RELAY_YAML_STR, 0);
    expect_type("\"12\"", RELAY_YAML_STR, 0);
    expect_type("'true'", RELAY_YAML_STR, 0);
    expect_type("\"null\"", RELAY_YAML_STR, 0);
    expect_type("!!str 12", RELAY_YAML_STR, 0);
    expect_type("!!str", RELAY_YAML_STR, 0);

    /* An empty plain value is null; an empty quoted value is the empty string. */
    root = parse_ok("a:\nb: ''\n");
    relay_yaml_resolve(relay_yaml_map_value(root, 0), &v);
    CHECK(v.type == RELAY_YAML_NULL);
    relay_yaml_resolve(relay_yaml_map_value(root, 1), &v);
    CHECK(v.type == RELAY_YAML_STR);
    relay_yaml_free(root);

    /* Double-quoted escapes may produce NUL bytes: the length is kept. */
    root = parse_ok("\"a\\0b\"");
    CHECK(root->len == 3 && root->text[1] == '\0');
    relay_yaml_free(root);
}


static void
test_errors(void)
{
    char deep[300];
    int i;

    CHECK_STR(parse_err("a: 1\nb: 2\na: 3\n", 15), "3:1: duplicate key \"a\" (first at 1:1)");
    CHECK_STR(parse_err("x:\n  a: 1\n  \"a\": 2\n", 19), "3:3: duplicate key \"a\" (first at 2:3)");
    CHECK_STR(parse_err("16: a\n0x10: b\n", 14), "2:1: duplicate key \"0x10\" (first at 1:1)");
    CHECK_STR(parse_err("~: a\nnull: b\n", 13), "2:1: duplicate key \"null\" (first at 1:1)");
    CHECK_STR(parse_err("a: &x 1\nb: *x\n", 14), "2:4: YAML aliases (*x) are not supported; write the value out");
    CHECK_STR(parse_err("a: 1\n---\nb: 2\n", 14), "2:1: only one YAML document is allowed per file");
    CHECK_STR(parse_err("a: !!int 1\n", 11),
              "1:4: YAML tag tag:yaml.org,2002:int is not supported (only !!str is); remove the tag");
    CHECK_STR(parse_err("a: !!map {}\n", 12),
              "1:4: YAML tag tag:yaml.org,2002:map is not supported on a mapping; remove the tag");
    CHECK_STR(parse_err("? [a]\n: b\n", 10), "1:3: mapping keys must be scalars");
    CHECK(strncmp(parse_err("a: x\n  b: y\n", 12), "2:4: ", 5) == 0);
    CHECK(strncmp(parse_err("a: [1, 2\n", 9), "2:1: ", 5) == 0);
    CHECK(strstr(parse_err("a: b\nc: \xff\n", 10), "2:4: ") == err);
    CHECK(strstr(err, "UTF-8") != NULL);
    CHECK(strstr(parse_err("a: \xc3\n", 6), "1:5: invalid trailing UTF-8 octet") == err);
    CHECK(strstr(parse_err("a: \"x\0y\"\n", 9), "1:") == err);

    /* Nesting: RELAY_YAML_MAX_DEPTH levels are fine, one more is refused. */
    for (i = 0; i < RELAY_YAML_MAX_DEPTH; i++) {
        deep[i] = '[';
        deep[RELAY_YAML_MAX_DEPTH * 2 - 1 - i] = ']';
    }
    deep[RELAY_YAML_MAX_DEPTH * 2] = '\0';
    relay_yaml_free(parse_ok(deep));
    for (i = 0; i < 150; i++) {
        deep[i] = '[';
    }
    CHECK_STR(parse_err(deep, 150), "1:65: nesting deeper than 64 levels");
}


static void
test_documents(void)
{
    relay_yaml_node *root = (relay_yaml_node *)1;

    CHECK(relay_yaml_parse("", 0, &root, err, sizeof(err)) == 0 && root == NULL);
    root = (relay_yaml_node *)1;
    CHECK(relay_yaml_parse("# only a comment\n", 17, &root, err, sizeof(err)) == 0 && root == NULL);
    root = parse_ok("---\na: 1\n...\n");
    CHECK(root != NULL && root->kind == RELAY_YAML_MAP);
    relay_yaml_free(root);
    root = parse_ok("&anchor {a: 1}");
    CHECK(root != NULL && root->kind == RELAY_YAML_MAP && root->count == 1);
    relay_yaml_free(root);
    root = parse_ok("[]");
    CHECK(root != NULL && root->kind == RELAY_YAML_SEQ && root->count == 0);
    relay_yaml_free(root);
}


int
main(void)
{
    test_marks();
    test_core_schema();
    test_errors();
    test_documents();
    CHECK_DONE();
}
