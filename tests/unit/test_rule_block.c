/* Unit test of rule_block: a qualifying events list comes out whole, in order, with its
 * marks; any list the Lua validator must see (a deferred entry, timeout or retries, a
 * handler written twice, no entries) is declined and leaves the block empty. */
#include "check.h"
#include "relay/rule_block.h"

static relay_pattern_buf buf;


/* The block built from an events list given as YAML; the rc of the build. */
static int
build(const char *yaml, relay_rule_block *block)
{
    char err[RELAY_YAML_ERR_MAX];
    relay_yaml_node *root = NULL;
    int rc;

    if (relay_yaml_parse(yaml, strlen(yaml), &root, err, sizeof(err)) != 0 || root == NULL) {
        fprintf(stderr, "unexpected parse error for %s: %s\n", yaml, err);
        CHECK(0);
        return -2;
    }
    rc = relay_rule_block_build(block, root, &buf);
    relay_yaml_free(root);
    return rc;
}


static void
check_declined(const char *yaml)
{
    relay_rule_block block;

    CHECK(build(yaml, &block) == -1);
    CHECK(block.count == 0 && block.entries == NULL && block.text == NULL);
}


static void
test_whole_list(void)
{
    relay_rule_block block;

    CHECK(build("- handler: a.b\n  pattern: {x: [1]}\n"
                "- pattern: {y: [{prefix: p}], z: {w: [true]}}\n  handler: c\n",
                &block)
          == 0);
    CHECK(block.count == 2);
    CHECK_STR(relay_rule_block_handler(&block, 0), "a.b");
    CHECK_STR(relay_rule_block_json(&block, 0), "{\"x\":[{\"eq\":1}]}");
    CHECK(block.entries[0].handler_len == 3 && block.entries[0].json_len == strlen("{\"x\":[{\"eq\":1}]}"));
    CHECK(block.entries[0].line == 1 && block.entries[0].col == 3);
    CHECK_STR(relay_rule_block_handler(&block, 1), "c");
    CHECK_STR(relay_rule_block_json(&block, 1),
              "{\"y\":[{\"prefix\":\"p\"}],\"z\":[{\"group\":{\"w\":[{\"eq\":true}]}}]}");
    CHECK(block.entries[1].line == 3 && block.entries[1].col == 3);
    relay_rule_block_free(&block);
    CHECK(block.entries == NULL && block.text == NULL && block.count == 0);
    relay_rule_block_free(&block);
}


static void
test_declined(void)
{
    check_declined("- handler: a\n  pattern: {x: [1]}\n- handler: b\n  pattern: {x: 1}\n");
    check_declined("- handler: a\n  pattern: {x: [1]}\n  timeout: 5s\n");
    check_declined("- handler: a\n  pattern: {x: [1]}\n  retries: 2\n");
    check_declined("- handler: a\n  pattern: {x: [1]}\n- handler: a\n  pattern: {x: [2]}\n");
    check_declined("- handler: h\n  pattern: {x: [1]}\n- handler: \"h\"\n  pattern: {x: [2]}\n");
    check_declined("- handler: a\n  pattern: {x: [1]}\n- [handler, b]\n");
    check_declined("- handler: [a]\n  pattern: {x: [1]}\n");
    check_declined("[]");
    check_declined("{handler: a, pattern: {x: [1]}}");
}


/* Many names, so that the duplicate check's table grows and probes; the one
 * name written twice is found wherever it is. */
static void
test_many_handlers(void)
{
    enum { N = 3000 };
    size_t size = (size_t)N * 64 + 64, len = 0, i;
    char *yaml = malloc(size);
    relay_rule_block block;

    CHECK(yaml != NULL);
    if (yaml == NULL) {
        return;
    }
    for (i = 0; i < N; i++) {
        len += (size_t)snprintf(yaml + len, size - len, "- handler: h%zu\n  pattern: {k: [%zu]}\n", i, i);
    }
    CHECK(build(yaml, &block) == 0 && block.count == N);
    CHECK_STR(relay_rule_block_handler(&block, N - 1), "h2999");
    CHECK_STR(relay_rule_block_json(&block, N - 1), "{\"k\":[{\"eq\":2999}]}");
    relay_rule_block_free(&block);
    snprintf(yaml + len, size - len, "- handler: h1234\n  pattern: {k: [0]}\n");
    check_declined(yaml);
    free(yaml);
}


int
main(void)
{
    test_whole_list();
    test_declined();
    test_many_handlers();
    relay_pattern_buf_free(&buf);
    CHECK_DONE();
}
