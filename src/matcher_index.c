/* The literal index. Each rule gets one anchor: a field that must hold for
 * the rule to match (reached through top-level fields and single-group
 * alternatives only, so it is ANDed with the rest) whose alternatives are all
 * literals, prefixes or suffixes. An event value at the anchor's node that
 * hits one of those literals makes the rule a candidate; only candidates and
 * rules without an anchor are evaluated in full. */
#include "matcher_internal.h"

#include <stdlib.h>
#include <string.h>


/* How selective an alternative is as an anchor; 0 means not indexable. */
static int
alt_score(const malt *a)
{
    switch (a->kind) {
    case ALT_EQ_STR:
    case ALT_EQ_NUM:
        return 4;
    case ALT_PREFIX:
        return a->str_len ? 3 : 1;
    case ALT_SUFFIX:
        return a->str_len ? 2 : 1;
    case ALT_EQ_TRUE:
    case ALT_EQ_FALSE:
    case ALT_EQ_NULL:
        return 1;
    default:
        return 0;
    }
}


static uint32_t alt_tag(const malt *a);


static int
field_score(const relay_matcher *m, const mfield *f)
{
    int best = 4, s;
    uint32_t a;

    for (a = f->first_alt; a != MNONE; a = m->alts[a].next) {
        s = alt_score(&m->alts[a]);
        if (s < best) {
            best = s;
        }
    }
    return best;
}


/* The fields a rule may anchor on, in order: visit(m, field, ctx) for each
 * field whose alternatives are all indexable, reached through top-level
 * fields and single-group alternatives (so it is ANDed with the rest). */
typedef int (*field_visit)(const relay_matcher *m, uint32_t field, void *ctx);

static int
each_anchorable(const relay_matcher *m, uint32_t group, field_visit visit, void *ctx)
{
    uint32_t f;

    for (f = m->groups[group].first_field; f != MNONE; f = m->fields[f].next) {
        const mfield *field = &m->fields[f];
        const malt *first = &m->alts[field->first_alt];

        if (field_score(m, field) > 0 && visit(m, f, ctx) < 0) {
            return -1;
        }
        if (first->kind == ALT_GROUP && first->next == MNONE && each_anchorable(m, first->group, visit, ctx) < 0) {
            return -1;
        }
    }
    return 0;
}


/* Counts of how many rules could anchor on each (node, tag, literal). */
static mentry *
literal_count(const relay_matcher *m, const mtable *counts, uint32_t node, const malt *a)
{
    uint32_t tag = alt_tag(a);
    const char *key = m->pool + a->str_off;

    return mtable_find(counts, mindex_hash(node, tag, key, a->str_len), node, tag, m->pool, key, a->str_len);
}


static int
count_field(const relay_matcher *m, uint32_t f, void *ctx)
{
    mtable *counts = ctx;
    uint32_t a, node = m->fields[f].node;

    for (a = m->fields[f].first_alt; a != MNONE; a = m->alts[a].next) {
        const malt *alt = &m->alts[a];
        mentry *e = literal_count(m, counts, node, alt);

        if (!e) {
            if (!(e = mtable_insert(counts, mindex_hash(node, alt_tag(alt), m->pool + alt->str_off, alt->str_len)))) {
                return -1;
            }
            e->node = node;
            e->tag = alt_tag(alt);
            e->key_off = alt->str_off;
            e->key_len = alt->str_len;
        }
        e->count++;
    }
    return 0;
}


/* The anchor chosen so far for one rule. */
typedef struct anchor_choice {
    const mtable *counts;
    uint32_t field;
    double cost;
} anchor_choice;

/* What an alternative costs as an anchor per rule sharing its literal: a
 * weak operand (a short prefix, true, null) makes most events candidates. */
static double
alt_weight(const malt *a)
{
    static const double weight[] = {0, 64, 4, 2, 1};

    return weight[alt_score(a)];
}


/* Expected candidates if the rule anchors on field f: rules sharing each of
 * its literals, weighted. The cheapest field wins, the first one on ties. */
static int
weigh_field(const relay_matcher *m, uint32_t f, void *ctx)
{
    anchor_choice *c = ctx;
    uint32_t a, node = m->fields[f].node;
    double cost = 0;

    for (a = m->fields[f].first_alt; a != MNONE; a = m->alts[a].next) {
        const malt *alt = &m->alts[a];
        const mentry *e = literal_count(m, c->counts, node, alt);

        cost += alt_weight(alt) * (e ? e->count : 1);
    }
    if (cost < c->cost) {
        c->cost = cost;
        c->field = f;
    }
    return 0;
}


/* The first anchorable field of a rule and how many there are. */
typedef struct anchor_options {
    uint32_t first;
    uint32_t count;
} anchor_options;

static int
note_option(const relay_matcher *m, uint32_t f, void *ctx)
{
    anchor_options *o = ctx;

    (void)m;
    if (o->count++ == 0) {
        o->first = f;
    }
    return 0;
}


/* Each rule's anchor: the field whose literals the fewest other rules share,
 * so that one event value makes few rules candidates however many rules
 * there are. A rule with one anchorable field has no choice; when no rule
 * has two, nothing needs counting. Returns -1 when memory ran out. */
static int
choose_anchors(const relay_matcher *m, uint32_t *anchors)
{
    mtable counts = {NULL, 0, 0};
    uint32_t r;
    int rc = 0, choices = 0;

    for (r = 0; r < m->nrules; r++) {
        anchor_options o = {MNONE, 0};

        if (msame_is_copy(m, r)) {
            anchors[r] = MNONE;
            continue;
        }
        each_anchorable(m, m->rules[r], note_option, &o);
        anchors[r] = o.first;
        choices |= o.count > 1;
    }
    if (choices && mtable_reserve(&counts, m->nalts) < 0) {
        rc = -1;
    }
    for (r = 0; choices && r < m->nrules && rc == 0; r++) {
        rc = msame_is_copy(m, r) ? 0 : each_anchorable(m, m->rules[r], count_field, &counts);
    }
    for (r = 0; choices && r < m->nrules && rc == 0; r++) {
        anchor_choice c = {&counts, MNONE, 1e300};

        if (msame_is_copy(m, r)) {
            continue;
        }
        each_anchorable(m, m->rules[r], weigh_field, &c);
        anchors[r] = c.field;
    }
    mtable_free(&counts);
    return rc;
}


static uint32_t
alt_tag(const malt *a)
{
    static const uint32_t tags[] = {
        [ALT_EQ_STR] = TAG_STR,   [ALT_EQ_NUM] = TAG_NUM,    [ALT_EQ_TRUE] = TAG_TRUE,  [ALT_EQ_FALSE] = TAG_FALSE,
        [ALT_EQ_NULL] = TAG_NULL, [ALT_PREFIX] = TAG_PREFIX, [ALT_SUFFIX] = TAG_SUFFIX,
    };

    return tags[a->kind];
}


/* Add a distinct length to a node's ascending prefix or suffix list. */
static int
add_length(uint32_t **lens, uint32_t *n, uint32_t len)
{
    uint32_t i, *grown;

    for (i = 0; i < *n && (*lens)[i] < len; i++) {
        ;
    }
    if (i < *n && (*lens)[i] == len) {
        return 0;
    }
    if (!(grown = realloc(*lens, (*n + 1) * sizeof(**lens)))) {
        return -1;
    }
    memmove(grown + i + 1, grown + i, (*n - i) * sizeof(*grown));
    grown[i] = len;
    *lens = grown;
    (*n)++;
    return 0;
}


/* Count one anchor alternative of `rule` in its index entry, made if new, and
 * note the entry's slot in *slot for the filling pass (the index was sized
 * for the anchors' alternatives first, so no insert moves an entry). */
static int
count_alt(relay_matcher *m, uint32_t node, const malt *a, uint32_t rule, uint32_t *slot)
{
    uint32_t tag = alt_tag(a);
    const char *key = m->pool + a->str_off;
    uint64_t h = mindex_hash(node, tag, key, a->str_len);
    mentry *e = mtable_find(&m->index, h, node, tag, m->pool, key, a->str_len);
    mnode *n = &m->nodes[node];

    if (!e) {
        if (!(e = mtable_insert(&m->index, h))) {
            return -1;
        }
        e->node = node;
        e->tag = tag;
        e->key_off = a->str_off;
        e->key_len = a->str_len;
        e->value = MNONE; /* last rule counted, to count each rule once */
    }
    *slot = (uint32_t)(e - m->index.slots);
    if (e->value != rule) {
        e->value = rule;
        e->count++;
    }
    n->indexed |= (uint8_t)(1u << tag);
    if (tag == TAG_PREFIX) {
        return add_length(&n->prefix_lens, &n->nprefix, a->str_len);
    }
    if (tag == TAG_SUFFIX) {
        return add_length(&n->suffix_lens, &n->nsuffix, a->str_len);
    }
    return 0;
}


/* Write `rule` into the postings of entry e, once. */
static void
fill_alt(relay_matcher *m, mentry *e, uint32_t rule)
{
    if (e->count == 0 || m->postings[e->value + e->count - 1] != rule) {
        m->postings[e->value + e->count++] = rule;
    }
}


/* Turn counts into offsets into m->postings and reset counts for filling. */
static int
layout_postings(relay_matcher *m)
{
    size_t i, total = 0;

    for (i = 0; i < m->index.cap; i++) {
        mentry *e = &m->index.slots[i];

        if (!e->used) {
            continue;
        }
        e->value = (uint32_t)total;
        total += e->count;
        e->count = 0;
    }
    m->npostings = total;
    return mgrow(&m->postings, &m->postings_cap, total ? total : 1, sizeof(*m->postings));
}


/* One pass over all rules: count each anchor alternative in its entry (its
 * slot noted in slots[alt]), or with fill write the rule into the entry's
 * postings; a rule without an anchor is listed as always-on. */
static int
index_pass(relay_matcher *m, const uint32_t *anchors, uint32_t *slots, int fill)
{
    uint32_t r, a;

    for (r = 0; r < m->nrules; r++) {
        const mfield *f;

        if (msame_is_copy(m, r)) {
            continue; /* reported with the rule it copies */
        }
        if (anchors[r] == MNONE) {
            if (fill) {
                m->always[m->nalways++] = r;
            }
            continue;
        }
        f = &m->fields[anchors[r]];
        for (a = f->first_alt; a != MNONE; a = m->alts[a].next) {
            if (!fill) {
                if (count_alt(m, f->node, &m->alts[a], r, &slots[a]) < 0) {
                    return -1;
                }
            } else {
                fill_alt(m, &m->index.slots[slots[a]], r);
            }
        }
    }
    return 0;
}


/* How many alternatives the chosen anchors hold: the most entries the index
 * can get, so that it is sized once (and no insert moves an entry whose slot
 * the counting pass noted). */
static size_t
anchor_alts(const relay_matcher *m, const uint32_t *anchors)
{
    size_t n = 0;
    uint32_t r, a;

    for (r = 0; r < m->nrules; r++) {
        if (anchors[r] == MNONE || msame_is_copy(m, r)) {
            continue;
        }
        for (a = m->fields[anchors[r]].first_alt; a != MNONE; a = m->alts[a].next) {
            n++;
        }
    }
    return n;
}


int
mindex_build(relay_matcher *m)
{
    uint32_t *anchors, *slots;
    int rc = -1;

    anchors = malloc((m->nrules ? m->nrules : 1) * sizeof(*anchors));
    slots = malloc((m->nalts ? m->nalts : 1) * sizeof(*slots));
    if (!anchors || !slots || choose_anchors(m, anchors) < 0) {
        free(anchors);
        free(slots);
        return -1;
    }
    free(m->always);
    m->nalways = 0;
    if ((m->always = malloc((m->nrules ? m->nrules : 1) * sizeof(*m->always)))
        && mtable_reserve(&m->index, anchor_alts(m, anchors)) == 0 && index_pass(m, anchors, slots, 0) == 0
        && layout_postings(m) == 0 && index_pass(m, anchors, slots, 1) == 0) {
        rc = 0;
    }
    free(anchors);
    free(slots);
    return rc;
}


void
mindex_clear(relay_matcher *m)
{
    size_t i;

    for (i = 0; i < m->nnodes; i++) {
        mnode *n = &m->nodes[i];

        free(n->prefix_lens);
        free(n->suffix_lens);
        n->prefix_lens = n->suffix_lens = NULL;
        n->nprefix = n->nsuffix = 0;
        n->indexed = 0;
    }
    mtable_free(&m->index);
    m->npostings = 0;
    m->nalways = 0;
}


/* Past this many slots an index's tags (4 bytes a slot) stop being certain to
 * stay cached while events stream through, and lookups are deferred. */
#define DEFER_LOOKUPS_ABOVE 4096
/* Deferred lookups held at once: more are run on the spot, so that an event
 * with many indexed values (up to the largest event) does not make a state
 * hold a note for each of them. */
#define MAX_DEFERRED 64


/* Mark the rules whose anchor literal (node, tag, key) was seen. */
static inline void
add_candidates(relay_match_state *s, uint64_t hash, uint32_t node, uint32_t tag, const char *key, size_t len)
{
    const relay_matcher *m = s->m;
    mentry *e = mtable_find(&m->index, hash, node, tag, m->pool, key, len);
    uint32_t i, rule;

    if (!e) {
        return;
    }
    for (i = 0; i < e->count; i++) {
        rule = m->postings[e->value + i];
        if (s->stamp[rule] == s->generation) {
            continue;
        }
        s->stamp[rule] = s->generation;
        if (mgrow(&s->cands, &s->cand_cap, s->ncand + 1, sizeof(*s->cands)) < 0) {
            s->oom = 1;
            return;
        }
        s->cands[s->ncand++] = rule;
    }
}


/* The lookup of an anchor literal an event holds: at once for a small index,
 * else noted for mindex_lookups_run, with its probe's first tag fetched now.
 * A large index's tags do not stay cached while the scan streams events
 * through, and waiting on that miss where the value was seen stalled the scan
 * (10,000 rules: 8 % of a bulk match in mtable_find). A string key stays
 * where it is until the event is done. Returns the note, or NULL when the
 * lookup is done (or memory ran out). */
mlookup *
mindex_lookup_later(relay_match_state *s, uint32_t node, uint32_t tag, const char *key, size_t len)
{
    const mtable *t = &s->m->index;
    uint64_t hash = mindex_hash(node, tag, key, len);
    mlookup *l;

    if (t->cap <= DEFER_LOOKUPS_ABOVE) {
        add_candidates(s, hash, node, tag, key, len);
        return NULL;
    }
    if (s->nlookup == MAX_DEFERRED) {
        mindex_lookups_run(s);
    }
    if (mgrow(&s->lookups, &s->lookup_cap, s->nlookup + 1, sizeof(*s->lookups)) < 0) {
        s->oom = 1;
        return NULL;
    }
    __builtin_prefetch((const uint32_t *)(const void *)(t->slots + t->cap) + (hash & (t->cap - 1)));
    l = &s->lookups[s->nlookup++];
    l->hash = hash;
    l->key = key;
    l->len = (uint32_t)len;
    l->node = node;
    l->tag = tag;
    return l;
}


/* The lookup of an anchor number an event holds. */
void
mindex_number_later(relay_match_state *s, uint32_t node, double num)
{
    mlookup *l = mindex_lookup_later(s, node, TAG_NUM, (const char *)&num, sizeof(num));

    if (l != NULL) {
        l->key = NULL; /* num is copied: the occurrence that holds it may move */
        l->num = num;
    }
}


void
mindex_lookups_run(relay_match_state *s)
{
    size_t i;

    for (i = 0; i < s->nlookup && !s->oom; i++) {
        const mlookup *l = &s->lookups[i];

        add_candidates(s, l->hash, l->node, l->tag, l->key != NULL ? l->key : (const char *)&l->num, l->len);
    }
    s->nlookup = 0;
}
