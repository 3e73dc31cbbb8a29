/* Numbers of an event turned into doubles only as exactly as the rules need.
 *
 * Correctly rounded conversion (strtod) of the 17-digit coordinates of a
 * GeoJSON event is most of the cost of matching number rules against them.
 * At a node whose rules only test numbers for equality (no gt/gte/lt/lte), a
 * value only matters when it equals one of the node's literals; a cheap
 * estimate, accurate to about 1e-15, already proves most values equal none,
 * and such a value is kept as its estimate: no alternative at the node can
 * tell the difference, since none of them holds for it either way. Values
 * near a literal, and at nodes that compare, get the exact conversion. */
#include "matcher_internal.h"
#include "relay/json_scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A value this close (relative) to a literal is converted exactly: far above
 * the estimate's error, far below any difference that matters. */
#define NEAR 1e-9
/* Estimates stay clear of overflow, underflow and subnormals inside this. */
#define MAX_EXP10 280
#define MAX_DIGITS 19

/* Reciprocals are not exact, but a multiply is far cheaper than a divide and
 * adds one more rounding at most. */
static const double pow10_neg[] = {
    1e-0,  1e-1,  1e-2,  1e-3,  1e-4,  1e-5,  1e-6,  1e-7,  1e-8,  1e-9,  1e-10, 1e-11,
    1e-12, 1e-13, 1e-14, 1e-15, 1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22,
};

static const double pow10_small[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};


static int
is_digit(char c)
{
    return (unsigned)(c - '0') < 10;
}


/* The exponent part after 'e' or 'E', clamped far beyond MAX_EXP10. */
static int
read_exponent(const char *p, const char *end)
{
    int neg = 0, e = 0;

    if (p < end && (*p == '+' || *p == '-')) {
        neg = *p++ == '-';
    }
    for (; p < end && is_digit(*p); p++) {
        if (e < 100000) {
            e = e * 10 + (*p - '0');
        }
    }
    return neg ? -e : e;
}


/* The value of valid JSON number text within a relative error of ~2e-15: up
 * to 19 significant digits scaled by exact powers of ten, one rounding per
 * step. Returns 0 when the scale is outside +-MAX_EXP10. */
static int
estimate(const char *p, const char *end, double *out)
{
    uint64_t mant = 0;
    int digits = 0, exp10 = 0, neg = *p == '-';
    double v;

    for (p += neg; p < end && is_digit(*p); p++) {
        if (digits < MAX_DIGITS) {
            mant = mant * 10 + (uint64_t)(*p - '0');
            digits += mant != 0;
        } else {
            exp10++;
        }
    }
    if (p < end && *p == '.') {
        for (p++; p < end && is_digit(*p); p++) {
            if (digits < MAX_DIGITS) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                digits += mant != 0;
                exp10--;
            }
        }
    }
    if (p < end) {
        exp10 += read_exponent(p + 1, end);
    }
    if (mant == 0) {
        *out = 0;
        return 1;
    }
    if (exp10 < -MAX_EXP10 || exp10 > MAX_EXP10) {
        return 0;
    }
    for (v = (double)mant; exp10 > 22; exp10 -= 22) {
        v *= 1e22;
    }
    for (; exp10 < -22; exp10 += 22) {
        v *= 1e-22;
    }
    v *= exp10 < 0 ? pow10_neg[-exp10] : pow10_small[exp10];
    *out = neg ? -v : v;
    return 1;
}


static int
near(double v, double literal)
{
    return fabs(v - literal) <= NEAR * fmax(fabs(v), fabs(literal));
}


/* Whether v is near one of the ascending literals. */
static int
near_any(const double *lits, uint32_t n, double v)
{
    uint32_t lo = 0, hi = n;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (lits[mid] < v) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return (lo < n && near(v, lits[lo])) || (lo > 0 && near(v, lits[lo - 1]));
}


double
mnumber_value(const mnode *n, const char *text, size_t len, int *unequal)
{
    double v;

    *unequal = n->eq_only && estimate(text, text + len, &v) && !near_any(n->eq_nums, n->neq_nums, v);
    if (*unequal) {
        return v;
    }
    v = relay_json_number(text, len);
    return v == 0 ? 0 : v; /* -0 indexes like 0 */
}


static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}


/* Gather each node's equality literals and whether anything compares there. */
static int
collect(relay_matcher *m)
{
    size_t f;
    uint32_t a;

    for (f = 0; f < m->nfields; f++) {
        mnode *n = &m->nodes[m->fields[f].node];

        for (a = m->fields[f].first_alt; a != MNONE; a = m->alts[a].next) {
            const malt *alt = &m->alts[a];
            double *grown;

            if (alt->kind == ALT_CMP_NUM) {
                n->compares_number = 1;
            } else if (alt->kind == ALT_EQ_NUM) {
                if (!(grown = realloc(n->eq_nums, (n->neq_nums + 1) * sizeof(*grown)))) {
                    return -1;
                }
                n->eq_nums = grown;
                n->eq_nums[n->neq_nums++] = alt->num;
            }
        }
    }
    return 0;
}


int
mnumbers_build(relay_matcher *m)
{
    size_t i;

    if (collect(m) < 0) {
        return -1;
    }
    for (i = 0; i < m->nnodes; i++) {
        mnode *n = &m->nodes[i];

        if (n->neq_nums > 1) {
            qsort(n->eq_nums, n->neq_nums, sizeof(*n->eq_nums), cmp_double);
        }
        n->eq_only = n->needs_number && !n->compares_number;
    }
    return 0;
}


void
mnumbers_clear(relay_matcher *m)
{
    size_t i;

    for (i = 0; i < m->nnodes; i++) {
        mnode *n = &m->nodes[i];

        free(n->eq_nums);
        n->eq_nums = NULL;
        n->neq_nums = 0;
        n->compares_number = n->eq_only = 0;
    }
}
