/* Internal layout of the matcher, shared by the src/matcher_*.c files only.
 *
 * Compile side: a trie of key paths ("nodes"), rules as trees of groups,
 * fields and alternatives linked by index, and a hash index from
 * (node, literal) to the rules that literal can make candidates.
 * Match side: per-event scratch recording the values found below tracked
 * nodes ("occurrences") grouped by object instance and key ("slots").
 */
#ifndef RELAY_MATCHER_INTERNAL_H
#define RELAY_MATCHER_INTERNAL_H

#include "relay/matcher.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MNONE UINT32_MAX
/* Up to this many children, a node's keys are compared directly instead of
 * hashed: cheaper for the few keys a rule set usually tracks per object. */
#define MFEW_CHILDREN 4

typedef enum alt_kind {
    ALT_EQ_STR,
    ALT_EQ_NUM,
    ALT_EQ_TRUE,
    ALT_EQ_FALSE,
    ALT_EQ_NULL,
    ALT_PREFIX,
    ALT_SUFFIX,
    ALT_EXISTS,
    ALT_CMP_NUM,
    ALT_CMP_TIME,
    ALT_GROUP
} alt_kind;

typedef enum cmp_op { CMP_GT, CMP_GTE, CMP_LT, CMP_LTE } cmp_op;

/* The row of each operator in relay_matcher_ops (matcher_ops.c); the foreign
 * names follow OP_FOREIGN and share no code: the reader refuses them all. */
typedef enum op_code {
    OP_EQ,
    OP_PREFIX,
    OP_SUFFIX,
    OP_EXISTS,
    OP_GT,
    OP_GTE,
    OP_LT,
    OP_LTE,
    OP_GROUP,
    OP_FOREIGN
} op_code;

/* Tags that keep literals of different types apart in the index. */
typedef enum index_tag { TAG_STR, TAG_NUM, TAG_TRUE, TAG_FALSE, TAG_NULL, TAG_PREFIX, TAG_SUFFIX } index_tag;

typedef struct malt {
    uint8_t kind;     /* alt_kind */
    uint8_t op;       /* cmp_op for ALT_CMP_* */
    uint8_t exists;   /* operand of ALT_EXISTS */
    uint32_t str_off; /* ALT_EQ_STR, ALT_PREFIX, ALT_SUFFIX: bytes in the pool */
    uint32_t str_len;
    uint32_t group;    /* ALT_GROUP */
    uint32_t next;     /* next alternative of the same field */
    double num;        /* ALT_EQ_NUM, ALT_CMP_NUM */
    int64_t offset_ms; /* ALT_CMP_TIME */
} malt;

typedef struct mfield {
    uint32_t node;
    uint32_t first_alt;
    uint32_t next; /* next field of the same group */
} mfield;

typedef struct mgroup {
    uint32_t node; /* the object the fields are keys of */
    uint32_t first_field;
    uint8_t holds_on_empty; /* whether the group holds against {} */
} mgroup;

typedef struct mnode {
    uint32_t parent;
    uint32_t key_off, key_len;
    uint32_t child_index; /* slot offset within an instance of parent */
    uint32_t nchildren;
    uint64_t child_lens;                  /* bit min(len, 63) set for each child key: skips hashing */
    uint32_t few_children[MFEW_CHILDREN]; /* the children while nchildren <= MFEW_CHILDREN */
    uint8_t needs_number;                 /* some alternative compares numbers here */
    uint8_t indexed;                      /* some literal of the index lives here */
    uint32_t *prefix_lens;                /* distinct anchor prefix lengths, ascending */
    uint32_t nprefix;
    uint32_t *suffix_lens;
    uint32_t nsuffix;
    double *eq_nums; /* equality literals here, ascending (matcher_numbers.c) */
    uint32_t neq_nums;
    uint8_t compares_number; /* some gt/gte/lt/lte alternative is here */
    uint8_t eq_only;         /* needs_number for equality only: estimates do */
} mnode;

/* Open-addressing hash table entry; used for trie edges and the index. */
typedef struct mentry {
    uint64_t hash;
    uint32_t node; /* parent (edges) or node (index) */
    uint32_t tag;  /* index_tag (index) */
    uint32_t key_off, key_len;
    uint32_t value; /* child node (edges); first posting (index) */
    uint32_t count; /* postings (index) */
    uint32_t used;
} mentry;

typedef struct mtable {
    mentry *slots;
    size_t cap, len; /* cap is a power of two or 0 */
} mtable;

/* One value found below a tracked node during a match. */
typedef struct mocc {
    const char *str; /* strings, unescaped */
    uint32_t len;
    uint32_t next; /* next occurrence in the same slot */
    int32_t inst;  /* objects: their instance, or -1 */
    uint8_t type;  /* relay_json_type */
    double num;    /* numbers at nodes with needs_number */
} mocc;

/* One key of one object instance. */
typedef struct mslot {
    uint32_t node;
    uint32_t head, tail; /* occurrence list; a repeated key restarts it */
    uint8_t present;
} mslot;

typedef struct minst {
    uint32_t node;
    uint32_t slot_base;
} minst;

/* An index lookup an event's value asked for, run when the event is scanned
 * (mindex_lookup_later). A string key stays where it is, in the event's text
 * or the state's arena, both fixed for the event; a number's double is
 * copied, as the occurrence array that holds it may move. */
typedef struct mlookup {
    uint64_t hash;
    const char *key; /* NULL: the key is num's bytes */
    double num;
    uint32_t len;
    uint32_t node;
    uint32_t tag;
} mlookup;

/* Per-event scratch of one matching thread: the values found so far and the
 * candidate rules. The matcher itself stays read-only while matching, so
 * threads with a state each can share one compiled matcher. */
struct relay_match_state {
    const relay_matcher *m; /* the matcher of the match in progress */
    mocc *occs;
    size_t nocc, occ_cap;
    mslot *slots;
    size_t nslot, slot_cap;
    minst *insts;
    size_t ninst, inst_cap;
    char *arena; /* unescaped strings; as large as the event */
    size_t arena_len, arena_cap;
    uint32_t *stamp; /* per rule: generation it became a candidate */
    size_t stamp_len;
    const relay_matcher *stamped; /* the matcher the stamps belong to */
    uint32_t generation;
    uint32_t *cands;
    size_t ncand, cand_cap;
    mlookup *lookups;
    size_t nlookup, lookup_cap;
    int oom;
    int64_t now_ms;
};

struct relay_matcher {
    /* compile side */
    char *pool;
    size_t pool_len, pool_cap;
    mnode *nodes;
    size_t nnodes, nodes_cap;
    mgroup *groups;
    size_t ngroups, groups_cap;
    mfield *fields;
    size_t nfields, fields_cap;
    malt *alts;
    size_t nalts, alts_cap;
    uint32_t *rules; /* rule id -> top group */
    size_t nrules, rules_cap;
    mtable edges; /* (parent, key) -> child node */
    mtable index; /* (node, tag, literal) -> postings */
    uint32_t *postings;
    size_t npostings, postings_cap;
    mtable texts;        /* rule text -> its first rule (value), its chain's last (count) */
    uint32_t *same_as;   /* per rule: the earlier rule of the same text, or MNONE */
    uint32_t *next_same; /* per rule: the next rule of the same text, or MNONE */
    size_t same_cap;
    uint32_t *always; /* rules without an indexable anchor, ascending */
    size_t nalways;
    int compiled;

    /* the single-threaded API's scratch (relay_matcher_match) */
    relay_match_state *own;
};

/* matcher_util.c */
int mgrow_slow(void *data, size_t *cap, size_t need, size_t elem);

/* Make *(T **)data hold at least `need` elements of size elem; 0, or -1
 * when out of memory. Inline because the per-event scratch calls it for
 * every value it records, and there is almost always room already. */
static inline int
mgrow(void *data, size_t *cap, size_t need, size_t elem)
{
    return need <= *cap ? 0 : mgrow_slow(data, cap, need, elem);
}

static inline uint64_t
load64(const char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}


static inline uint32_t
load32(const char *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}


/* memcmp(a, b, len) == 0 for the short keys and literals the matcher
 * compares (a hash-table hit, a candidate's literal), without a call: two
 * loads from each end, which overlap when len is not a multiple of their
 * width. */
static inline int
same_bytes(const char *a, const char *b, size_t len)
{
    if (len >= 8 && len <= 16) {
        return load64(a) == load64(b) && load64(a + len - 8) == load64(b + len - 8);
    }
    if (len >= 4 && len < 8) {
        return load32(a) == load32(b) && load32(a + len - 4) == load32(b + len - 4);
    }
    return memcmp(a, b, len) == 0;
}


uint64_t mhash(const void *key, size_t len, uint64_t seed);
int mpool_add(relay_matcher *m, const char *s, size_t len, uint32_t *off);
mentry *mtable_find(const mtable *t, uint64_t hash, uint32_t node, uint32_t tag, const char *pool, const char *key,
                    size_t len);
int mtable_reserve(mtable *t, size_t n);
mentry *mtable_insert(mtable *t, uint64_t hash);
void mtable_free(mtable *t);
uint64_t medge_hash(uint32_t parent, const char *key, size_t len);
uint64_t mindex_hash(uint32_t node, uint32_t tag, const char *key, size_t len);

/* matcher_rule.c; validated: the caller vouches that json is valid JSON. */
int mrule_parse(relay_matcher *m, const char *json, size_t len, int validated, uint32_t *group, char *err,
                size_t errlen);
uint32_t mnode_child(const relay_matcher *m, uint32_t parent, const char *key, size_t len);

/* matcher_same.c */
mentry *msame_find(const relay_matcher *m, const char *text, size_t len, uint64_t *hash);
int msame_follow(relay_matcher *m, uint32_t rule, mentry *e);
int msame_record(relay_matcher *m, uint32_t rule, const char *text, size_t len, uint64_t hash);
int msame_reserve(relay_matcher *m, size_t rules);

/* Whether the rule follows an identical earlier one (not indexed itself). */
static inline int
msame_is_copy(const relay_matcher *m, uint32_t rule)
{
    return m->same_as[rule] != MNONE;
}

/* matcher_index.c */
int mindex_build(relay_matcher *m);
void mindex_clear(relay_matcher *m);
mlookup *mindex_lookup_later(relay_match_state *s, uint32_t node, uint32_t tag, const char *key, size_t len);
void mindex_number_later(relay_match_state *s, uint32_t node, double num);
void mindex_lookups_run(relay_match_state *s);

/* matcher_numbers.c */
int mnumbers_build(relay_matcher *m);
void mnumbers_clear(relay_matcher *m);
/* The value for node n's alternatives; *unequal when it provably equals none
 * of the node's literals (then it may be an estimate: see the file). */
double mnumber_value(const mnode *n, const char *text, size_t len, int *unequal);

/* matcher_eval.c */
int meval_rule(const relay_match_state *s, uint32_t rule);

/* matcher_time.c: parse RFC3339 into seconds since the epoch plus
 * nanoseconds; *beyond_ns is set when further nonzero fraction digits exist. */
int mtime_parse(const char *s, size_t len, int64_t *sec, int32_t *nsec, int *beyond_ns);

#endif
