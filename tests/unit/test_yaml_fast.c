/* Unit test of the YAML fast path (src/yaml_fast.c): relay_yaml_parse must give
 * exactly what libyaml alone gives (relay_yaml_parse_libyaml): the same tree,
 * marks, scalar styles and texts, or the same error. Checked over every YAML
 * file in the repository, over each with every single-byte deletion and with
 * indicators inserted at every position (the near misses the fast path must
 * decline or read right), and over hand-picked cases. The bench templates must
 * take the fast path. */
#define _GNU_SOURCE /* nftw */
#include "check.h"
#include "relay/yaml_doc.h"
#include "../common/yaml_same_tree.h"

#include <ftw.h>

int relay_yaml_fast_parse(const char *text, size_t len, relay_yaml_node **root);

/* Files longer than this are compared whole, not mutated byte by byte. */
#define MUTATE_MAX 1500

static long compared, fast_taken, files;


/* Both parsers agree on text; prints it when they do not. */
static void
compare(const char *text, size_t len, const char *what)
{
    char err_a[RELAY_YAML_ERR_MAX], err_b[RELAY_YAML_ERR_MAX];
    relay_yaml_node *a = NULL, *b = NULL, *fast = NULL;
    int rc_a = relay_yaml_parse(text, len, &a, err_a, sizeof(err_a));
    int rc_b = relay_yaml_parse_libyaml(text, len, &b, err_b, sizeof(err_b));
    int ok = rc_a == rc_b && (rc_a != 0 || strcmp(err_a, err_b) == 0) && yaml_same_tree(a, b);

    if (!ok) {
        fprintf(stderr, "%s: the fast path differs from libyaml on:\n%.*s\n---\n", what, (int)len, text);
    }
    CHECK(ok);
    compared++;
    fast_taken += relay_yaml_fast_parse(text, len, &fast);
    relay_yaml_free(fast);
    relay_yaml_free(a);
    relay_yaml_free(b);
}


/* The text with every byte deleted in turn, and with indicators inserted
 * before every byte: all of them (every), or one per position in turn. */
static void
mutate(const char *text, size_t len, const char *what, int every)
{
    static const char inserts[] = ":- #'\"{}[],\n&*!|>?%@`\\\t\x7f\x80";
    size_t n = sizeof(inserts) - 1, i, k;
    char *buf = malloc(len + 2);

    CHECK(buf != NULL);
    for (i = 0; i < len; i++) {
        memcpy(buf, text, i);
        memcpy(buf + i, text + i + 1, len - i - 1);
        compare(buf, len - 1, what);
        for (k = every ? 0 : i % n; k < n; k += every ? 1 : n) {
            memcpy(buf, text, i);
            buf[i] = inserts[k];
            memcpy(buf + i + 1, text + i, len - i);
            compare(buf, len + 1, what);
        }
    }
    free(buf);
}


static char *
slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0
        || (text = malloc((size_t)n + 1)) == NULL || fread(text, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        CHECK(0);
        free(text);
        text = NULL;
        n = 0;
    }
    if (f != NULL) {
        fclose(f);
    }
    *len = (size_t)n;
    return text;
}


static int
visit_file(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    size_t len, n = strlen(path);
    char *text;
    relay_yaml_node *root = NULL;

    (void)sb;
    (void)ftw;
    if (type != FTW_F || n < 5 || strcmp(path + n - 5, ".yaml") != 0 || strstr(path, "/build") != NULL) {
        return 0;
    }
    if ((text = slurp(path, &len)) == NULL) {
        return 0;
    }
    files++;
    compare(text, len, path);
    if (len <= MUTATE_MAX) {
        mutate(text, len, path, 0);
    }
    if (strstr(path, "tests/bench/patterns/") != NULL && relay_yaml_fast_parse(text, len, &root) != 1) {
        fprintf(stderr, "%s does not take the fast path\n", path);
        CHECK(0);
    }
    relay_yaml_free(root);
    free(text);
    return 0;
}


static void
test_repository_files(void)
{
    static const char *const dirs[] = {"spec/fixtures", "examples", "tests/bench/patterns", "docs"};
    const char *data = getenv("RELAY_TEST_DATA");
    char buf[4096], path[4200];
    size_t i;

    if (data == NULL) {
        fprintf(stderr, "RELAY_TEST_DATA is not set; skipping the repository's YAML files\n");
        return;
    }
    /* <source>/tests/data (which need not exist): the source tree is the rest. */
    snprintf(buf, sizeof(buf), "%s", data);
    if (strlen(buf) > 11 && strcmp(buf + strlen(buf) - 11, "/tests/data") == 0) {
        buf[strlen(buf) - 11] = '\0';
    }
    for (i = 0; i < sizeof(dirs) / sizeof(*dirs); i++) {
        snprintf(path, sizeof(path), "%s/%s", buf, dirs[i]);
        nftw(path, visit_file, 16, FTW_PHYS);
    }
    CHECK(files >= 30);
}


static void
test_cases(void)
{
    static const char *const cases[] = {
        "a: 1\nb:\n  - x\n  - {c: d}\nlong_key:   \"q\"\n",
        "events:\n- handler: a\n  pattern: {x: [1, 2]}\nruntime: {image: host}\n",
        "events:\n  - handler: a   # why\n    pattern:\n      x: [\"1\", '2', -3, 4.5, ~, null, true]\n",
        "# head\n\na: b c d\n\n# mid\nc: 'q'  \n",
        "a: x:y\nb: http://h/p\nc: echo a,b [c] {d}\n",
        "a: [a b, c d]\nb: {k: v, l: [m, {n: o}]}\nc: []\nd: {}\n",
        "a: b\n  c\n",
        "a:\n  b\n",
        "a:\n",
        "a: 1\na: 2\n",
        "1: x\n",
        "true: x\n",
        "a: {b: 1, b: 2}\n",
        "a: [1,]\n",
        "a: {b}\n",
        "a: {b: }\n",
        "a: \"x\\ty\"\n",
        "a: 'it''s'\n",
        "a: - b\n",
        "- a\n- b\n",
        "---\na: 1\n",
        "a: 1\n---\nb: 2\n",
        "a: 1\n...\n",
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "a: |\n  text\n",
        "a:\n- b\n- c\n d: 1\n",
        "a:\n  - b\n - c\n",
        "a:\n    b: 1\n  c: 2\n",
        "a: [b,\n  c]\n",
        "a: \"b\n  c\"\n",
        "a: b #c\nd: e#f\n",
        "a: \"b\"#c\n",
        "a: x\n  # comment\n  more\n",
        "  a: 1\n",
        "a: 1",
        "a:1\n",
        "? a\n: b\n",
        "a: [b: c]\n",
        "a: {\"b\": c}\n",
        "a: {b: \"c\"}\n",
        "a: -1\nb: -x\nc: .5\nd: +1\n",
        "",
        "# only a comment\n",
        "\n\n\n",
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        compare(cases[i], strlen(cases[i]), "case");
        mutate(cases[i], strlen(cases[i]), "case", 1);
    }
}


/* Nesting at the limit is libyaml's to refuse, with its message. */
static void
test_depth(void)
{
    char text[1024];
    int depth, i;
    size_t n;

    for (depth = RELAY_YAML_MAX_DEPTH - 2; depth <= RELAY_YAML_MAX_DEPTH + 1; depth++) {
        n = (size_t)snprintf(text, sizeof(text), "a: ");
        for (i = 0; i < depth; i++) {
            text[n++] = '[';
        }
        for (i = 0; i < depth; i++) {
            text[n++] = ']';
        }
        text[n++] = '\n';
        compare(text, n, "depth");
    }
}


int
main(void)
{
    test_cases();
    test_depth();
    test_repository_files();
    printf("compared %ld texts (%ld files), %ld through the fast path\n", compared, files, fast_taken);
    CHECK(fast_taken > 1000);
    CHECK_DONE();
}
