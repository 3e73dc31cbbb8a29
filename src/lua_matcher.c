/* Lua binding of the matcher: module "relay.core.matcher".
 * The only matcher file that sees the Lua API. Data errors come back as
 * nil, message; luaL_error is for programming errors (bad argument types). */
#include "relay/json_scan.h"
#include "relay/matcher.h"

#include <lauxlib.h>
#include <lua.h>

#include "lua_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MATCHER_MT "relay.core.matcher"
#define IDS_ON_STACK 64
#define READ_CHUNK (4u << 20)
#define OUT_CHUNK (64u << 10)

int luaopen_relay_core_matcher(lua_State *L);


static relay_matcher **
check_box(lua_State *L)
{
    relay_matcher **box = luaL_checkudata(L, 1, MATCHER_MT);

    if (!*box)
        luaL_error(L, "matcher already freed");
    return box;
}


static int
nil_error(lua_State *L, const char *msg)
{
    lua_pushnil(L);
    lua_pushstring(L, msg);
    return 2;
}


/*** @function matcher.new
 * A new, empty matcher. Returns a userdata freed by the garbage collector. */
static int
l_new(lua_State *L)
{
    relay_matcher **box = lua_newuserdata(L, sizeof *box);

    *box = NULL;
    luaL_getmetatable(L, MATCHER_MT);
    lua_setmetatable(L, -2);
    if (!(*box = relay_matcher_new()))
        return luaL_error(L, "out of memory");
    return 1;
}


/*** @function m:add(rule_json)
 * Add a rule in normal form. Returns its 0-based id, or nil, err. */
static int
l_add(lua_State *L)
{
    relay_matcher **box = check_box(L);
    size_t len;
    const char *rule = luaL_checklstring(L, 2, &len);
    char err[256];
    int id = relay_matcher_add(*box, rule, len, err, sizeof err);

    if (id < 0)
        return nil_error(L, err);
    lua_pushinteger(L, id);
    return 1;
}


/*** @function m:add_many(rules)
 * Add an array of rules in normal form, in order (one call instead of one per rule).
 * Returns the number added, or nil, err, index (1-based) of the first refused rule;
 * the rules before it stay added. */
static int
l_add_many(lua_State *L)
{
    relay_matcher **box = check_box(L);
    size_t len, n, i;
    const char *rule;
    char err[256];

    luaL_checktype(L, 2, LUA_TTABLE);
    n = lua_objlen(L, 2);
    for (i = 1; i <= n; i++) {
        lua_rawgeti(L, 2, (int)i);
        if (!(rule = lua_tolstring(L, -1, &len)))
            return luaL_error(L, "add_many: rules[%d] is not a string", (int)i);
        if (relay_matcher_add(*box, rule, len, err, sizeof err) < 0) {
            lua_pushnil(L);
            lua_pushstring(L, err);
            lua_pushinteger(L, (lua_Integer)i);
            return 3;
        }
        lua_pop(L, 1);
    }
    lua_pushinteger(L, (lua_Integer)n);
    return 1;
}


/*** @function m:compile()
 * Build the index now (match() would do it lazily). Returns true or nil, err. */
static int
l_compile(lua_State *L)
{
    relay_matcher **box = check_box(L);
    char err[256];

    if (relay_matcher_compile(*box, err, sizeof err) < 0)
        return nil_error(L, err);
    lua_pushboolean(L, 1);
    return 1;
}


/*** @function m:count()
 * Number of rules added. */
static int
l_count(lua_State *L)
{
    relay_matcher **box = check_box(L);

    lua_pushinteger(L, (lua_Integer)relay_matcher_count(*box));
    return 1;
}


static int64_t
opt_int64(lua_State *L, int idx, int64_t dflt)
{
    return lua_isnoneornil(L, idx) ? dflt : (int64_t)luaL_checknumber(L, idx);
}


static size_t
check_size(lua_State *L, int idx)
{
    lua_Number n = luaL_checknumber(L, idx);

    if (n < 0)
        luaL_argerror(L, idx, "must not be negative");
    return n >= (lua_Number)SIZE_MAX ? SIZE_MAX : (size_t)n;
}


/*** @function m:match(event, max_bytes, now_ms)
 * Match one event (JSON text). Returns an array of 0-based rule ids in
 * ascending order (possibly empty), or nil, reason when malformed. */
static int
l_match(lua_State *L)
{
    relay_matcher **box = check_box(L);
    size_t len, max_bytes = check_size(L, 3);
    const char *event = luaL_checklstring(L, 2, &len);
    int64_t now_ms = opt_int64(L, 4, 0);
    uint32_t small[IDS_ON_STACK], *ids = small;
    char reason[256];
    int n, i;

    n = relay_matcher_match(*box, event, len, max_bytes, now_ms, ids, IDS_ON_STACK, reason,
                            sizeof reason);
    if (n < 0)
        return nil_error(L, reason);
    if (n > IDS_ON_STACK) {
        if (!(ids = malloc((size_t)n * sizeof *ids)))
            return luaL_error(L, "out of memory");
        relay_matcher_match(*box, event, len, max_bytes, now_ms, ids, (size_t)n, reason,
                            sizeof reason);
    }
    lua_createtable(L, n, 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, ids[i]);
        lua_rawseti(L, -2, i + 1);
    }
    if (ids != small)
        free(ids);
    return 1;
}


/*** @function matcher.validate_object(text, max_bytes)
 * Check that text is one valid JSON object. Returns true or nil, reason. */
static int
l_validate_object(lua_State *L)
{
    size_t len, max_bytes = check_size(L, 2);
    const char *text = luaL_checklstring(L, 1, &len);
    char reason[256];

    if (relay_json_validate_object(text, len, max_bytes, reason, sizeof reason) < 0)
        return nil_error(L, reason);
    lua_pushboolean(L, 1);
    return 1;
}


/*** @function __gc
 * Free the matcher; idempotent. */
static int
l_gc(lua_State *L)
{
    relay_matcher **box = luaL_checkudata(L, 1, MATCHER_MT);

    relay_matcher_free(*box);
    *box = NULL;
    return 0;
}


/* Defined in the second half of this file. */
static int l_scan_file(lua_State *L);

static const luaL_Reg methods[] = {
    {"add", l_add},     {"add_many", l_add_many}, {"compile", l_compile}, {"count", l_count},
    {"match", l_match}, {"scan_file", l_scan_file}, {"__gc", l_gc}, {NULL, NULL},
};

static const luaL_Reg functions[] = {
    {"new", l_new},
    {"validate_object", l_validate_object},
    {NULL, NULL},
};


/* State of one m:scan_file() call; everything it allocates is freed by
 * job_free, and no Lua error is raised while it is alive. */
typedef struct scan_job {
    relay_matcher *m;
    size_t max_bytes;
    int64_t now_ms;
    int count_only, label_only;
    const char **labels;    /* per rule id, or NULL for the id itself */
    size_t nlabels;
    const char *display;
    FILE *in;
    char *buf, *out;
    size_t cap, outlen;
    uint32_t *ids;
    size_t ids_cap;
    long long line, matched, total;
} scan_job;


static void
job_flush(scan_job *job)
{
    if (job->outlen)
        fwrite(job->out, 1, job->outlen, stdout);
    job->outlen = 0;
}


static void
job_emit(scan_job *job, uint32_t id)
{
    char num[32];
    const char *label = num;
    int n;

    if (job->outlen > OUT_CHUNK - 256)
        job_flush(job);
    if (job->label_only) {
        job->outlen += (size_t)snprintf(job->out + job->outlen, 32, "%lld\n", job->line);
        return;
    }
    if (id < job->nlabels && job->labels[id])
        label = job->labels[id];
    else
        snprintf(num, sizeof num, "%u", id);
    n = snprintf(job->out + job->outlen, OUT_CHUNK - job->outlen, "%lld %s\n", job->line, label);
    if (n < 0 || (size_t)n >= OUT_CHUNK - job->outlen) {
        /* A label longer than the buffer goes straight to stdio. */
        job_flush(job);
        printf("%lld %s\n", job->line, label);
        return;
    }
    job->outlen += (size_t)n;
}


static void
job_line(scan_job *job, const char *text, size_t len)
{
    char reason[256];
    uint32_t *grown;
    int n, i;

    job->line++;
    job->total++;
    n = relay_matcher_match(job->m, text, len, job->max_bytes, job->now_ms, job->ids,
                            job->ids_cap, reason, sizeof reason);
    if (n > 0 && (size_t)n > job->ids_cap && (grown = realloc(job->ids, (size_t)n * sizeof *grown))) {
        job->ids = grown;
        job->ids_cap = (size_t)n;
        n = relay_matcher_match(job->m, text, len, job->max_bytes, job->now_ms, job->ids,
                                job->ids_cap, reason, sizeof reason);
    }
    if (n < 0) {
        job_flush(job);
        fprintf(stderr, "relay: %s:%lld: %s\n", job->display, job->line, reason);
        return;
    }
    if (n == 0)
        return;
    job->matched++;
    if (job->count_only)
        return;
    for (i = 0; i < n && (size_t)i < job->ids_cap; i++) {
        job_emit(job, job->ids[i]);
        if (job->label_only)
            break;
    }
}


/* A line that does not fit the buffer: `have` bytes of it are in buf. Read
 * past its end without keeping it, report it, and keep what follows. */
static size_t
job_skip_long_line(scan_job *job, size_t have)
{
    size_t total = have, n;
    char *nl, reason[128];

    for (;;) {
        n = fread(job->buf, 1, job->cap, job->in);
        if (n == 0)
            break;
        if ((nl = memchr(job->buf, '\n', n))) {
            total += (size_t)(nl - job->buf);
            n -= (size_t)(nl - job->buf) + 1;
            memmove(job->buf, nl + 1, n);
            goto report;
        }
        total += n;
    }
    n = 0;
report:
    job->line++;
    job->total++;
    job_flush(job);
    snprintf(reason, sizeof reason, "event too large (%zu bytes > %zu)", total, job->max_bytes);
    fprintf(stderr, "relay: %s:%lld: %s\n", job->display, job->line, reason);
    return n;
}


/* Split the input into lines and match each; 0, or -1 on a read error. */
static int
job_run(scan_job *job)
{
    size_t start = 0, end = 0, n;
    char *nl;

    for (;;) {
        if ((nl = memchr(job->buf + start, '\n', end - start))) {
            job_line(job, job->buf + start, (size_t)(nl - (job->buf + start)));
            start = (size_t)(nl - job->buf) + 1;
            continue;
        }
        memmove(job->buf, job->buf + start, end - start);
        end -= start;
        start = 0;
        if (end == job->cap) {
            end = job_skip_long_line(job, end);
            continue;
        }
        n = fread(job->buf + end, 1, job->cap - end, job->in);
        if (n == 0)
            break;
        end += n;
    }
    if (ferror(job->in))
        return -1;
    if (end > 0)
        job_line(job, job->buf, end);
    return 0;
}


static int
opt_field_bool(lua_State *L, int opts, const char *name)
{
    int v;

    lua_getfield(L, opts, name);
    v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}


static lua_Number
opt_field_number(lua_State *L, int opts, const char *name, lua_Number dflt)
{
    lua_Number v = dflt;

    lua_getfield(L, opts, name);
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1))
            luaL_error(L, "scan_file: opts.%s must be a number", name);
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}


/* Collect opts.names (0-based with names[0], else 1-based) into job->labels.
 * The strings stay alive because opts stays on the stack. */
static int
job_labels(lua_State *L, int opts, scan_job *job)
{
    size_t i, n = relay_matcher_count(job->m);
    int base;

    lua_getfield(L, opts, "names");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    if (!lua_istable(L, -1))
        luaL_error(L, "scan_file: opts.names must be a table");
    lua_rawgeti(L, -1, 0);
    base = lua_isnil(L, -1) ? 1 : 0;
    lua_pop(L, 1);
    if (n && !(job->labels = calloc(n, sizeof *job->labels)))
        return -1;
    job->nlabels = n;
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, -1, (int)i + base);
        if (lua_type(L, -1) == LUA_TSTRING)
            job->labels[i] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}


static void
job_free(scan_job *job)
{
    if (job->in && job->in != stdin)
        fclose(job->in);
    free(job->labels);
    free(job->buf);
    free(job->out);
    free(job->ids);
}


/* Read buffer: room for the longest acceptable line plus its newline. */
static size_t
job_buffer_size(size_t max_bytes)
{
    size_t cap = max_bytes < (1u << 30) ? max_bytes + 1 : (1u << 30);

    return cap < READ_CHUNK ? READ_CHUNK : cap;
}


/*** @function m:scan_file(path, opts)
 * Match every line of a file ("-" = stdin) without per-line Lua calls.
 * opts: max_bytes, now_ms, count_only, names ({[0]=...} or 1-based labels
 * per rule id), label_only (print only the line number, once per matching
 * line), display_name (file name in messages). Prints "<line> <label>" per
 * match to stdout, "relay: <file>:<line>: <reason>" per malformed line
 * (an empty line is malformed: "empty event") to stderr; every line counts.
 * Returns matched_events, total_events, or nil, err when the file cannot be
 * read. */
static int
l_scan_file(lua_State *L)
{
    relay_matcher **box = check_box(L);
    const char *path = luaL_checkstring(L, 2);
    scan_job job;
    int rc;

    memset(&job, 0, sizeof job);
    if (!lua_isnoneornil(L, 3))
        luaL_checktype(L, 3, LUA_TTABLE);
    else {
        lua_settop(L, 2);
        lua_newtable(L);
    }
    job.m = *box;
    job.max_bytes = (size_t)opt_field_number(L, 3, "max_bytes", 1 << 20);
    job.now_ms = (int64_t)opt_field_number(L, 3, "now_ms", 0);
    job.count_only = opt_field_bool(L, 3, "count_only");
    job.label_only = opt_field_bool(L, 3, "label_only");
    lua_getfield(L, 3, "display_name");
    job.display = lua_isstring(L, -1) ? lua_tostring(L, -1) : path; /* kept on the stack */
    if (job_labels(L, 3, &job) < 0) {
        job_free(&job);
        return luaL_error(L, "out of memory");
    }
    job.in = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!job.in) {
        lua_pushfstring(L, "cannot open %s: %s", path, strerror(errno));
        job_free(&job);
        return nil_error(L, lua_tostring(L, -1));
    }
    job.cap = job_buffer_size(job.max_bytes);
    job.ids_cap = IDS_ON_STACK;
    if (!(job.buf = malloc(job.cap)) || !(job.out = malloc(OUT_CHUNK))
        || !(job.ids = malloc(job.ids_cap * sizeof *job.ids))) {
        job_free(&job);
        return luaL_error(L, "out of memory");
    }
    rc = job_run(&job);
    job_flush(&job);
    fflush(stdout);
    job_free(&job);
    if (rc < 0)
        return nil_error(L, "read error");
    lua_pushnumber(L, (lua_Number)job.matched);
    lua_pushnumber(L, (lua_Number)job.total);
    return 2;
}


int
luaopen_relay_core_matcher(lua_State *L)
{
    relay_lua_new_module(L, MATCHER_MT, methods, functions);
    return 1;
}
