/* Growable arrays, the string pool, hashing and the open-addressing tables
 * behind the key-path trie and the literal index. */
#include "matcher_internal.h"

#include <stdlib.h>
#include <string.h>


/* mgrow, when the array must grow. */
int
mgrow_slow(void *data, size_t *cap, size_t need, size_t elem)
{
    void **ptr = data;
    size_t want = *cap ? *cap : 16;
    void *grown;

    if (need <= *cap) {
        return 0;
    }
    while (want < need) {
        if (want > SIZE_MAX / 2) {
            return -1;
        }
        want *= 2;
    }
    if (want > SIZE_MAX / elem) {
        return -1;
    }
    grown = realloc(*ptr, want * elem);
    if (!grown) {
        return -1;
    }
    *ptr = grown;
    *cap = want;
    return 0;
}


static inline uint64_t
mix(uint64_t h)
{
    h ^= h >> 31;
    h *= UINT64_C(0xd6e8feb86659fd93);
    h ^= h >> 32;
    return h;
}


/* The last 1-7 bytes of a key as one word, read whole rather than copied
 * byte by byte into a word: the copy's narrow stores followed by a wide load
 * stalled store forwarding, and that stall was most of hashing a short key.
 * Loads overlap below 8 bytes; the seed holds the length, so each length's
 * words need only tell its own keys apart, and they do. */
static inline uint64_t
tail_word(const unsigned char *p, size_t len)
{
    uint32_t lo, hi;

    if (len >= 4) {
        memcpy(&lo, p, 4);
        memcpy(&hi, p + len - 4, 4);
        return (uint64_t)lo | (uint64_t)hi << 32;
    }
    return (uint64_t)p[0] | (uint64_t)p[len / 2] << 8 | (uint64_t)p[len - 1] << 16;
}


/* A small multiply-xorshift hash; keys are short and attacker-chosen
 * collisions only cost probe time, never correctness. */
uint64_t
mhash(const void *key, size_t len, uint64_t seed)
{
    const unsigned char *p = key;
    uint64_t h = seed ^ (len * UINT64_C(0x9e3779b97f4a7c15));
    uint64_t w;

    while (len >= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * UINT64_C(0xbf58476d1ce4e5b9);
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    if (len) {
        h = (h ^ tail_word(p, len)) * UINT64_C(0x94d049bb133111eb);
    }
    return mix(h);
}


uint64_t
medge_hash(uint32_t parent, const char *key, size_t len)
{
    return mhash(key, len, (uint64_t)parent * UINT64_C(0x9fb21c651e98df25));
}


uint64_t
mindex_hash(uint32_t node, uint32_t tag, const char *key, size_t len)
{
    return mhash(key, len, ((uint64_t)node << 3 | tag) * UINT64_C(0xc2b2ae3d27d4eb4f) + 1);
}


/* Append bytes to the pool (NUL-terminated for convenience). */
int
mpool_add(relay_matcher *m, const char *s, size_t len, uint32_t *off)
{
    if (m->pool_len + len + 1 > UINT32_MAX || mgrow(&m->pool, &m->pool_cap, m->pool_len + len + 1, 1) < 0) {
        return -1;
    }
    if (len) {
        memcpy(m->pool + m->pool_len, s, len);
    }
    m->pool[m->pool_len + len] = '\0';
    *off = (uint32_t)m->pool_len;
    m->pool_len += len + 1;
    return 0;
}


/* Each table allocation holds `cap` entries followed by `cap` 32-bit tags
 * (high hash bits, 0 = free). Probes read only the tags, which stay in
 * cache even when the entries of a 10k-rule index do not: most lookups of
 * event values miss, and then no entry is touched at all. */
static inline uint32_t *
mtable_tags(const mtable *t)
{
    return (uint32_t *)(void *)(t->slots + t->cap);
}


static inline uint32_t
mtable_tag(uint64_t hash)
{
    return (uint32_t)(hash >> 32) | 1;
}


mentry *
mtable_find(const mtable *t, uint64_t hash, uint32_t node, uint32_t tag, const char *pool, const char *key, size_t len)
{
    size_t mask, i;
    const uint32_t *tags;
    uint32_t want = mtable_tag(hash);

    if (!t->cap) {
        return NULL;
    }
    mask = t->cap - 1;
    tags = mtable_tags(t);
    for (i = hash & mask; tags[i]; i = (i + 1) & mask) {
        const mentry *e = &t->slots[i];

        if (tags[i] == want && e->hash == hash && e->node == node && e->tag == tag && e->key_len == len
            && same_bytes(pool + e->key_off, key, len)) {
            return &t->slots[i];
        }
    }
    return NULL;
}


static int
mtable_resize(mtable *t, size_t cap)
{
    mentry *old = t->slots, *fresh;
    uint32_t *tags;
    size_t i, j;

    if (cap > SIZE_MAX / (sizeof(*fresh) + sizeof(*tags))) {
        return -1;
    }
    fresh = calloc(cap, sizeof(*fresh) + sizeof(*tags));
    if (!fresh) {
        return -1;
    }
    tags = (uint32_t *)(void *)(fresh + cap);
    for (i = 0; i < t->cap; i++) {
        if (!old[i].used) {
            continue;
        }
        for (j = old[i].hash & (cap - 1); tags[j]; j = (j + 1) & (cap - 1)) {
            ;
        }
        fresh[j] = old[i];
        tags[j] = mtable_tag(old[i].hash);
    }
    free(old);
    t->slots = fresh;
    t->cap = cap;
    return 0;
}


/* Room for `n` entries in all, so that filling a table whose size is known
 * rehashes nothing (growing by doubling moved and cleared each entry about
 * twice more). */
int
mtable_reserve(mtable *t, size_t n)
{
    size_t cap = t->cap ? t->cap : 16;

    while (n * 2 > cap) {
        if (cap > SIZE_MAX / 4) {
            return -1;
        }
        cap *= 2;
    }
    return cap == t->cap ? 0 : mtable_resize(t, cap);
}


/* A free entry for `hash`, already marked used; the caller fills it. */
mentry *
mtable_insert(mtable *t, uint64_t hash)
{
    size_t i;
    uint32_t *tags;

    if ((t->len + 1) * 2 > t->cap && mtable_reserve(t, t->len + 1) < 0) {
        return NULL;
    }
    tags = mtable_tags(t);
    for (i = hash & (t->cap - 1); tags[i]; i = (i + 1) & (t->cap - 1)) {
        ;
    }
    memset(&t->slots[i], 0, sizeof(t->slots[i]));
    t->slots[i].used = 1;
    t->slots[i].hash = hash;
    tags[i] = mtable_tag(hash);
    t->len++;
    return &t->slots[i];
}


void
mtable_free(mtable *t)
{
    free(t->slots);
    t->slots = NULL;
    t->cap = t->len = 0;
}
