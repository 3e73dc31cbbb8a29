/* Identical rules evaluated once. Many apps (or many handlers of one) carry
 * the very same pattern; each copy used to be indexed and evaluated on its
 * own, so a value that made one candidate made them all, and the per-event
 * cost grew with the copies. A rule whose text equals an earlier rule's is
 * not indexed: it follows that rule in a chain, and a hit of the first rule
 * reports the whole chain. Texts are compared byte for byte (the rules'
 * normal form makes equal patterns equal text); rules that differ only in
 * spelling stay apart, which costs speed, never a match. */
#include "matcher_internal.h"

#include <string.h>

#define TEXT_SEED 0x5a4d45ULL


/* Room in the chain arrays for `rules` rules in all. */
static int
grow_chains(relay_matcher *m, size_t rules)
{
    size_t cap = m->same_cap;

    if (mgrow(&m->same_as, &cap, rules, sizeof(*m->same_as)) < 0) {
        return -1;
    }
    return mgrow(&m->next_same, &m->same_cap, rules, sizeof(*m->next_same));
}


/* Room in the chain arrays and the text table for `rules` rules in all. */
int
msame_reserve(relay_matcher *m, size_t rules)
{
    return grow_chains(m, rules) < 0 ? -1 : mtable_reserve(&m->texts, rules);
}


/* Room in the chain arrays for rule id `rule`, which starts alone. */
static int
room_for(relay_matcher *m, uint32_t rule)
{
    if (grow_chains(m, (size_t)rule + 1) < 0) {
        return -1;
    }
    m->same_as[rule] = m->next_same[rule] = MNONE;
    return 0;
}


/* The entry of an earlier rule with this very text, or NULL; *hash is the
 * text's, for msame_record. */
mentry *
msame_find(const relay_matcher *m, const char *text, size_t len, uint64_t *hash)
{
    *hash = mhash(text, len, TEXT_SEED);
    return mtable_find(&m->texts, *hash, 0, 0, m->pool, text, len);
}


/* Rule `rule` has the text of entry e's rule: it joins that rule's chain. */
int
msame_follow(relay_matcher *m, uint32_t rule, mentry *e)
{
    if (room_for(m, rule) < 0) {
        return -1;
    }
    m->same_as[rule] = e->value;
    m->next_same[e->count] = rule; /* after the chain's last rule: ids stay ascending */
    e->count = rule;
    return 0;
}


/* Rule `rule` was parsed from text (hashed by msame_find): later rules with
 * the same text follow it. */
int
msame_record(relay_matcher *m, uint32_t rule, const char *text, size_t len, uint64_t hash)
{
    uint32_t off;
    mentry *e;

    if (room_for(m, rule) < 0 || mpool_add(m, text, len, &off) < 0 || (e = mtable_insert(&m->texts, hash)) == NULL) {
        return -1;
    }
    e->key_off = off;
    e->key_len = (uint32_t)len;
    e->value = e->count = rule;
    return 0;
}
