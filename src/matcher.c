/* The matcher's public API and the scan visitor that collects, for one event,
 * the values below key paths some rule uses. See include/relay/matcher.h. */
#include "matcher_internal.h"
#include "relay/json_scan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slot 0 is a pseudo key holding the top-level value. */
#define ROOT_SLOT 0


static int
set_message(char *buf, size_t len, const char *text)
{
    if (buf && len) {
        snprintf(buf, len, "%s", text);
    }
    return -1;
}


relay_matcher *
relay_matcher_new(void)
{
    relay_matcher *m = calloc(1, sizeof(*m));

    if (!m) {
        return NULL;
    }
    /* Node 0 is the event's top-level object. */
    if (mgrow(&m->nodes, &m->nodes_cap, 1, sizeof(*m->nodes)) < 0) {
        free(m);
        return NULL;
    }
    memset(&m->nodes[0], 0, sizeof(m->nodes[0]));
    m->nodes[0].parent = MNONE;
    m->nnodes = 1;
    return m;
}


static int
add_rule(relay_matcher *m, const char *rule_json, size_t len, int validated, char *err, size_t errlen)
{
    size_t groups = m->ngroups, fields = m->nfields, alts = m->nalts;
    uint64_t hash;
    uint32_t group;
    mentry *same;

    if (m->nrules >= INT32_MAX) {
        return set_message(err, errlen, "too many rules");
    }
    if (mgrow(&m->rules, &m->rules_cap, m->nrules + 1, sizeof(*m->rules)) < 0) {
        return set_message(err, errlen, "out of memory");
    }
    if ((same = msame_find(m, rule_json, len, &hash)) != NULL) {
        if (msame_follow(m, (uint32_t)m->nrules, same) < 0) {
            return set_message(err, errlen, "out of memory");
        }
        m->rules[m->nrules] = m->rules[same->value];
        m->compiled = 0;
        return (int)m->nrules++;
    }
    if (mrule_parse(m, rule_json, len, validated, &group, err, errlen) < 0) {
        /* Nodes made for the failed rule stay; they only widen tracking. */
        m->ngroups = groups;
        m->nfields = fields;
        m->nalts = alts;
        return -1;
    }
    if (msame_record(m, (uint32_t)m->nrules, rule_json, len, hash) < 0) {
        return set_message(err, errlen, "out of memory");
    }
    m->rules[m->nrules] = group;
    m->compiled = 0;
    return (int)m->nrules++;
}


int
relay_matcher_add(relay_matcher *m, const char *rule_json, size_t len, char *err, size_t errlen)
{
    return add_rule(m, rule_json, len, 0, err, errlen);
}


int
relay_matcher_add_compiled(relay_matcher *m, const char *rule_json, size_t len, char *err, size_t errlen)
{
    return add_rule(m, rule_json, len, 1, err, errlen);
}


int
relay_matcher_reserve(relay_matcher *m, size_t more, char *err, size_t errlen)
{
    if (more > INT32_MAX - m->nrules) {
        return set_message(err, errlen, "too many rules");
    }
    if (mgrow(&m->rules, &m->rules_cap, m->nrules + more, sizeof(*m->rules)) < 0
        || msame_reserve(m, m->nrules + more) < 0) {
        return set_message(err, errlen, "out of memory");
    }
    return 0;
}


int
relay_matcher_compile(relay_matcher *m, char *err, size_t errlen)
{
    if (m->compiled) {
        return 0;
    }
    mindex_clear(m);
    mnumbers_clear(m);
    if (mindex_build(m) < 0 || mnumbers_build(m) < 0) {
        mindex_clear(m);
        mnumbers_clear(m);
        return set_message(err, errlen, "out of memory");
    }
    m->compiled = 1;
    return 0;
}


size_t
relay_matcher_count(const relay_matcher *m)
{
    return m->nrules;
}


relay_match_state *
relay_match_state_new(void)
{
    size_t size = (sizeof(relay_match_state) + 63) & ~(size_t)63;
    relay_match_state *st = aligned_alloc(64, size);

    if (st) {
        memset(st, 0, size);
    }
    return st;
}


void
relay_match_state_free(relay_match_state *st)
{
    if (!st) {
        return;
    }
    free(st->occs);
    free(st->slots);
    free(st->insts);
    free(st->arena);
    free(st->stamp);
    free(st->cands);
    free(st->lookups);
    free(st);
}


/* Append a value to slot s; returns its index or MNONE when out of memory. */
static uint32_t
add_occ(relay_match_state *st, int32_t s, relay_json_type type)
{
    mslot *slot = &st->slots[s];
    mocc *o;
    uint32_t id;

    if (mgrow(&st->occs, &st->occ_cap, st->nocc + 1, sizeof(*st->occs)) < 0) {
        st->oom = 1;
        return MNONE;
    }
    id = (uint32_t)st->nocc++;
    o = &st->occs[id];
    o->type = (uint8_t)type;
    o->next = MNONE;
    o->inst = -1;
    o->str = NULL;
    o->len = 0;
    if (slot->tail == MNONE) {
        slot->head = id;
    } else {
        st->occs[slot->tail].next = id;
    }
    slot->tail = id;
    return id;
}


static int32_t
visit_key(void *ctx, int32_t object, const char *key, size_t len, int escaped)
{
    relay_match_state *st = ctx;
    const relay_matcher *m = st->m;
    const minst *inst = &st->insts[object];
    uint32_t child;
    mslot *s;

    if (escaped) {
        char *out = st->arena + st->arena_len;

        len = relay_json_unescape(key, len, out);
        st->arena_len += len;
        key = out;
    }
    if (!(m->nodes[inst->node].child_lens & UINT64_C(1) << (len < 63 ? len : 63))) {
        return -1;
    }
    child = mnode_child(m, inst->node, key, len);
    if (child == MNONE) {
        return -1;
    }
    /* A repeated key starts over: the last one wins. */
    s = &st->slots[inst->slot_base + m->nodes[child].child_index];
    s->node = child;
    s->present = 1;
    s->head = s->tail = MNONE;
    return (int32_t)(inst->slot_base + m->nodes[child].child_index);
}


static void
index_string(relay_match_state *st, uint32_t node, const mocc *o)
{
    const mnode *n = &st->m->nodes[node];
    uint32_t i;

    if (n->indexed & 1u << TAG_STR) {
        mindex_lookup_later(st, node, TAG_STR, o->str, o->len);
    }
    for (i = 0; i < n->nprefix && n->prefix_lens[i] <= o->len; i++) {
        mindex_lookup_later(st, node, TAG_PREFIX, o->str, n->prefix_lens[i]);
    }
    for (i = 0; i < n->nsuffix && n->suffix_lens[i] <= o->len; i++) {
        mindex_lookup_later(st, node, TAG_SUFFIX, o->str + o->len - n->suffix_lens[i], n->suffix_lens[i]);
    }
}


static void
index_literal(relay_match_state *st, uint32_t node, relay_json_type type)
{
    uint32_t tag = type == RELAY_JSON_TRUE ? TAG_TRUE : type == RELAY_JSON_FALSE ? TAG_FALSE : TAG_NULL;

    if (st->m->nodes[node].indexed & 1u << tag) {
        mindex_lookup_later(st, node, tag, "", 0);
    }
}


static void
visit_scalar(void *ctx, int32_t s, relay_json_type type, const char *text, size_t len, int escaped)
{
    relay_match_state *st = ctx;
    uint32_t node = st->slots[s].node, id = add_occ(st, s, type);
    const mnode *n = &st->m->nodes[node];
    int unequal = 0;
    mocc *o;

    if (id == MNONE) {
        return;
    }
    o = &st->occs[id];
    if (type == RELAY_JSON_STRING && escaped) {
        o->str = st->arena + st->arena_len;
        len = relay_json_unescape(text, len, st->arena + st->arena_len);
        st->arena_len += len;
    } else {
        o->str = text;
    }
    o->len = (uint32_t)len;
    o->num = 0;
    if (type == RELAY_JSON_NUMBER && n->needs_number) {
        o->num = mnumber_value(n, text, len, &unequal);
    }
    if (!n->indexed) {
        return;
    }
    if (type == RELAY_JSON_STRING) {
        index_string(st, node, o);
    } else if (type == RELAY_JSON_NUMBER && n->indexed & 1u << TAG_NUM && !unequal) {
        mindex_number_later(st, node, o->num);
    } else if (type == RELAY_JSON_TRUE || type == RELAY_JSON_FALSE || type == RELAY_JSON_NULL) {
        index_literal(st, node, type);
    }
}


static int32_t
visit_object(void *ctx, int32_t s)
{
    relay_match_state *st = ctx;
    uint32_t node = st->slots[s].node, id = add_occ(st, s, RELAY_JSON_OBJECT);
    uint32_t nchildren = st->m->nodes[node].nchildren, i;
    minst *inst;

    if (id == MNONE || nchildren == 0) {
        return -1;
    }
    if (mgrow(&st->insts, &st->inst_cap, st->ninst + 1, sizeof(*st->insts)) < 0 || st->nslot + nchildren > INT32_MAX
        || mgrow(&st->slots, &st->slot_cap, st->nslot + nchildren, sizeof(*st->slots)) < 0) {
        st->oom = 1;
        return -1;
    }
    inst = &st->insts[st->ninst];
    inst->node = node;
    inst->slot_base = (uint32_t)st->nslot;
    for (i = 0; i < nchildren; i++) {
        st->slots[st->nslot + i].present = 0;
        st->slots[st->nslot + i].head = st->slots[st->nslot + i].tail = MNONE;
    }
    st->nslot += nchildren;
    st->occs[id].inst = (int32_t)st->ninst;
    return (int32_t)st->ninst++;
}


/* What visit_key's first test lets through, so that the scanner can skip
 * the call for every other key. */
static uint64_t
visit_key_lengths(void *ctx, int32_t object)
{
    const relay_match_state *st = ctx;

    return st->m->nodes[st->insts[object].node].child_lens;
}


/* Arrays are transparent: elements belong to the same key. */
static int32_t
visit_array(void *ctx, int32_t s)
{
    (void)ctx;
    return s;
}


/* Per-rule candidate stamps for m's rules: kept across events (a generation
 * counter clears them), started over for another matcher or more rules. */
static int
ready_stamps(relay_match_state *st, const relay_matcher *m)
{
    size_t need = m->nrules ? m->nrules : 1;
    uint32_t *stamp;

    if (st->stamped == m && st->stamp_len >= need) {
        return 0;
    }
    if (st->stamp_len < need) {
        if ((stamp = realloc(st->stamp, need * sizeof(*stamp))) == NULL) {
            return -1;
        }
        st->stamp = stamp;
        st->stamp_len = need;
    }
    memset(st->stamp, 0, st->stamp_len * sizeof(*st->stamp));
    st->generation = 0;
    st->stamped = m;
    return 0;
}


/* Reset the per-event scratch; the arena gets room for every unescaped byte. */
static int
begin_event(relay_match_state *st, const relay_matcher *m, size_t len, int64_t now_ms)
{
    if (ready_stamps(st, m) < 0 || mgrow(&st->arena, &st->arena_cap, len + 1, 1) < 0
        || mgrow(&st->slots, &st->slot_cap, 1, sizeof(*st->slots)) < 0) {
        return -1;
    }
    st->m = m;
    st->nocc = st->ninst = st->ncand = st->nlookup = st->arena_len = 0;
    st->oom = 0;
    st->now_ms = now_ms;
    if (++st->generation == 0) {
        memset(st->stamp, 0, st->stamp_len * sizeof(*st->stamp));
        st->generation = 1;
    }
    st->slots[ROOT_SLOT].node = 0;
    st->slots[ROOT_SLOT].present = 1;
    st->slots[ROOT_SLOT].head = st->slots[ROOT_SLOT].tail = MNONE;
    st->nslot = 1;
    return 0;
}


static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}


/* Evaluate candidates and always-on rules in ascending id order. */
static int
collect_hits(relay_match_state *st, uint32_t *ids, size_t ids_cap)
{
    const relay_matcher *m = st->m;
    size_t c = 0, a = 0, count = 0;
    uint32_t rule;
    int copies = 0;

    if (st->ncand > 1) {
        qsort(st->cands, st->ncand, sizeof(*st->cands), cmp_u32);
    }
    while (c < st->ncand || a < m->nalways) {
        if (a == m->nalways || (c < st->ncand && st->cands[c] < m->always[a])) {
            rule = st->cands[c++];
        } else {
            rule = m->always[a++];
        }
        if (!meval_rule(st, rule)) {
            continue;
        }
        copies |= m->next_same[rule] != MNONE;
        for (; rule != MNONE; rule = m->next_same[rule]) {
            if (count < ids_cap) {
                ids[count] = rule;
            }
            count++;
        }
    }
    /* a chain's copies come after later rules' ids */
    if (copies && count <= ids_cap) {
        qsort(ids, count, sizeof(*ids), cmp_u32);
    }
    return (int)count;
}


int
relay_matcher_match_with(const relay_matcher *m, relay_match_state *st, const char *event, size_t len, size_t max_bytes,
                         int64_t now_ms, uint32_t *ids, size_t ids_cap, char *reason, size_t reasonlen)
{
    relay_json_visitor v = {st, visit_key, visit_scalar, visit_object, visit_array, visit_key_lengths};

    if (len > max_bytes) {
        return relay_json_validate_object(event, len, max_bytes, reason, reasonlen);
    }
    if (!m->compiled) {
        return set_message(reason, reasonlen, "matcher not compiled");
    }
    if (begin_event(st, m, len, now_ms) < 0) {
        return set_message(reason, reasonlen, "out of memory");
    }
    if (relay_json_scan_object(event, len, max_bytes, &v, ROOT_SLOT, reason, reasonlen) < 0) {
        return -1;
    }
    if (st->nlookup) {
        mindex_lookups_run(st);
    }
    if (st->oom) {
        return set_message(reason, reasonlen, "out of memory");
    }
    return collect_hits(st, ids, ids_cap);
}


int
relay_matcher_match_line(const relay_matcher *m, relay_match_state *st, const char *text, size_t avail, int eol_at_end,
                         size_t max_bytes, int64_t now_ms, uint32_t *ids, size_t ids_cap, size_t *len)
{
    relay_json_visitor v = {st, visit_key, visit_scalar, visit_object, visit_array, visit_key_lengths};
    int n;

    if (avail > max_bytes + 1) {
        avail = max_bytes + 1;
        eol_at_end = 0;
    }
    if (!m->compiled || begin_event(st, m, avail, now_ms) < 0
        || relay_json_scan_line(text, avail, eol_at_end, &v, ROOT_SLOT, len) < 0 || *len > max_bytes) {
        return -1;
    }
    if (st->nlookup) {
        mindex_lookups_run(st);
    }
    if (st->oom) {
        return -1;
    }
    n = collect_hits(st, ids, ids_cap);
    return n >= 0 && (size_t)n <= ids_cap ? n : -1;
}


int
relay_matcher_match(relay_matcher *m, const char *event, size_t len, size_t max_bytes, int64_t now_ms, uint32_t *ids,
                    size_t ids_cap, char *reason, size_t reasonlen)
{
    if (len > max_bytes) {
        return relay_json_validate_object(event, len, max_bytes, reason, reasonlen);
    }
    if (relay_matcher_compile(m, NULL, 0) < 0 || (!m->own && (m->own = relay_match_state_new()) == NULL)) {
        return set_message(reason, reasonlen, "out of memory");
    }
    return relay_matcher_match_with(m, m->own, event, len, max_bytes, now_ms, ids, ids_cap, reason, reasonlen);
}


void
relay_matcher_free(relay_matcher *m)
{
    if (!m) {
        return;
    }
    mindex_clear(m);
    mnumbers_clear(m);
    mtable_free(&m->edges);
    free(m->pool);
    free(m->nodes);
    free(m->groups);
    free(m->fields);
    free(m->alts);
    free(m->rules);
    free(m->postings);
    free(m->always);
    mtable_free(&m->texts);
    free(m->same_as);
    free(m->next_same);
    relay_match_state_free(m->own);
    free(m);
}
