/* The matcher's hash table (src/matcher_util.c) confirms a hit by its bytes:
 * entries whose hashes all collide are told apart by key, at every length
 * and with the one differing byte at every position, so a byte comparison
 * that skips part of a key is found. */
#include "../../src/matcher_internal.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

#define MAX_LEN 24
#define HASH UINT64_C(0x1234567890abcdef) /* every entry's: they all collide */


/* key i of length len: 'a' repeated, with byte i set to 'b' (i == len: none). */
static void
make_key(char *out, size_t len, size_t i)
{
    memset(out, 'a', len);
    if (i < len) {
        out[i] = 'b';
    }
}


static void
test_colliding_keys(void)
{
    char pool[MAX_LEN * (MAX_LEN + 1) * (MAX_LEN + 2)], key[MAX_LEN + 1];
    uint32_t offs[MAX_LEN + 1][MAX_LEN + 1];
    size_t used = 0, len, i;
    mtable t = {NULL, 0, 0};

    for (len = 1; len <= MAX_LEN; len++) {
        for (i = 0; i <= len; i++) {
            mentry *e = mtable_insert(&t, HASH);

            CHECK(e != NULL);
            if (e == NULL) {
                return;
            }
            make_key(pool + used, len, i);
            offs[len][i] = (uint32_t)used;
            e->key_off = (uint32_t)used;
            e->key_len = (uint32_t)len;
            e->value = (uint32_t)(len * 100 + i);
            used += len;
        }
    }
    for (len = 1; len <= MAX_LEN; len++) {
        for (i = 0; i <= len; i++) {
            mentry *e;

            make_key(key, len, i);
            e = mtable_find(&t, HASH, 0, 0, pool, key, len);
            CHECK(e != NULL && e->value == len * 100 + i && e->key_off == offs[len][i]);
            key[len - 1] ^= 0x40; /* a key of this length that was never inserted, when it differs */
            e = mtable_find(&t, HASH, 0, 0, pool, key, len);
            CHECK(e == NULL || memcmp(pool + e->key_off, key, len) == 0);
        }
    }
    mtable_free(&t);
}


/* Every byte of a key counts in its hash: a key and the same key with one
 * byte changed, at any position of any length, hash apart (the 1-7 bytes past
 * the last whole word are read as overlapping words). */
static void
test_hash_uses_every_byte(void)
{
    char base[MAX_LEN], other[MAX_LEN];
    size_t len, i;

    for (len = 1; len <= MAX_LEN; len++) {
        make_key(base, len, len);
        for (i = 0; i < len; i++) {
            make_key(other, len, i);
            CHECK(mhash(base, len, 7) != mhash(other, len, 7));
        }
        CHECK(mhash(base, len, 7) == mhash(base, len, 7));
        CHECK(len == 1 || mhash(base, len, 7) != mhash(base, len - 1, 7));
    }
}


/* Room made up front: filling to it moves no entry. */
static void
test_reserve(void)
{
    mtable t = {NULL, 0, 0};
    mentry *first;
    uint64_t i;

    CHECK(mtable_reserve(&t, 1000) == 0 && t.cap >= 2000);
    first = mtable_insert(&t, 0);
    for (i = 1; i < 1000; i++) {
        CHECK(mtable_insert(&t, i * UINT64_C(0x9e3779b97f4a7c15)) != NULL);
    }
    CHECK(t.len == 1000 && first->used && first->hash == 0 && mtable_insert(&t, 1) != NULL && t.len == 1001);
    mtable_free(&t);
}


/* The literal index is sized for the anchors' alternatives, not for every
 * alternative: fields that cannot anchor (thresholds, exists) or that lost to
 * another anchor take no room in it. */
static void
test_index_sized_by_anchors(void)
{
    relay_matcher *m = relay_matcher_new();
    char rule[160], err[200];
    int i, n;

    CHECK(m != NULL);
    if (m == NULL) {
        return;
    }
    for (i = 0; i < 1000; i++) {
        n = snprintf(rule, sizeof(rule),
                     "{\"a\":[{\"eq\":\"x%d\"}],\"b\":[{\"gt\":%d}],\"c\":[{\"exists\":true}],"
                     "\"d\":[{\"lt\":5},{\"gt\":9}]}",
                     i, i);
        CHECK(relay_matcher_add(m, rule, (size_t)n, err, sizeof(err)) == i);
    }
    CHECK(relay_matcher_compile(m, err, sizeof(err)) == 0);
    CHECK(m->nalts == 5000 && m->index.len == 1000 && m->index.cap == 2048);
    relay_matcher_free(m);
}


int
main(void)
{
    test_colliding_keys();
    test_hash_uses_every_byte();
    test_reserve();
    test_index_sized_by_anchors();
    CHECK_DONE();
}
