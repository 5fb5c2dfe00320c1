/*
 * ctfread: rpcscope's own CTF 1.8 reader (see ctfread.h for what it reads and what it refuses).
 *
 * Three parts: the metadata (TSDL text, plain or in metadata packets) parsed into a tree of types;
 * the packets of every stream file, checked end to end before any event is decoded so that a
 * damaged stream is refused before a row is written; and the events, decoded by walking the types
 * with a bit cursor, merged across streams by timestamp.
 */
#define _GNU_SOURCE
#include "ctfread.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_MEMBERS 256
#define MAX_STRBUF 4096

/* ---------------------------------------------------------------- types */

enum tkind { T_INT, T_ENUM, T_STRING, T_STRUCT, T_VARIANT, T_ARRAY, T_SEQUENCE };

struct enum_entry {
    char *label;
    int64_t lo, hi;
};

struct member {
    char *name;
    struct ctfread_type *type;
    int tag;                             /* variant: index of the tag member; sequence: of the length member */
    int *option_of_entry;                /* variant: option index for each entry of the tag's enumeration */
    int is_char_array;                   /* array/sequence of 8-bit text integers: read as a string */
    int is_id;                           /* named "id": the event id when in an event header */
    int maps_clock;                      /* an integer updating the stream's clock */
    const struct ctfread_type *tag_type; /* variant: the tag's enumeration */
};

struct ctfread_type {
    enum tkind kind;
    unsigned size, align; /* bits; int and enum: size; others: alignment only */
    int is_signed, is_text, maps_clock;
    struct ctfread_type *container; /* enum: its integer; array/sequence: the element */
    struct enum_entry *entries;
    size_t n_entries;
    struct member *members; /* struct members, variant options */
    size_t n_members;
    char *tag_name;      /* variant: <tag>; sequence: length member's name */
    size_t n_fixed;      /* struct: its leading byte-sized integers, at fixed offsets ... */
    uint64_t fixed_bits; /* ... that together span this many bits */
    uint32_t *fixed_off; /* ... each at this bit offset from the aligned start */
    uint64_t length;     /* array */
    struct ctfread_type *next_alloc;
};

struct clock_def {
    struct ctfread_clock pub;
    char *name;
};

struct ctfread_class {
    char *name;
    uint64_t id, stream_id;
    struct ctfread_type *context, *payload;
    struct stream_class *sc;
};

struct stream_class {
    uint64_t id;
    struct ctfread_type *packet_context, *event_header, *event_context;
    struct ctfread_class **by_id; /* dense by event id */
    size_t n_by_id;
    const struct clock_def *clock; /* of the header's timestamp */
    int ctx_packet_size, ctx_content_size, ctx_ts_begin, ctx_ts_end, ctx_discarded, ctx_cpu, ctx_seq;
    unsigned discarded_bits;
};

struct trace {
    char *dir;
    struct ctfread_type *packet_header;
    int hdr_magic, hdr_stream_id;
    struct stream_class *streams;
    size_t n_streams;
    struct ctfread_class *classes;
    size_t n_classes;
    struct clock_def *clocks;
    size_t n_clocks;
    int lttng;                  /* env tracer_name lttng-*: clocks count from the epoch */
    struct ctfread_type *types; /* every type allocated, freed with the trace */
};

/* ---------------------------------------------------------------- streams and the reader */

struct stream {
    struct trace *tr;
    char *path;
    const uint8_t *data;
    size_t len;
    size_t pkt;                      /* byte offset of the current packet */
    size_t released;                 /* pages before this offset are given back */
    uint64_t pkt_bytes, content_end; /* current packet's size (bytes), its content end (bits) */
    uint64_t pos;                    /* bit offset in the file */
    struct stream_class *sc;
    uint64_t clock;
    int cpu;
    int have_prev; /* a previous packet: its counters below */
    uint64_t prev_discarded, prev_ts_end, prev_seq;
    int done;
    struct ctfread_event ev; /* the stream's next event, decoded */
    int64_t ival[2][MAX_MEMBERS];
    const char *sval[2][MAX_MEMBERS];
    char strbuf[2][MAX_STRBUF];
    int64_t scratch_ival[MAX_MEMBERS];
    const char *scratch_sval[MAX_MEMBERS];
    char scratch_strbuf[MAX_STRBUF];
};

struct ctfread_reader {
    struct trace *traces;
    size_t n_traces;
    struct stream *streams;
    size_t n_streams;
    const struct ctfread_clock *clock;
    struct stream *current; /* whose event ctfread_next returned last */
    struct ctfread_discarded *disc;
    size_t n_disc, cap_disc;
    int started;
};

static void say(char *why, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "ctfread: out of memory\n");
        exit(2);
    }
    return p;
}

static void *xrealloc(void *p, size_t size)
{
    p = realloc(p, size ? size : 1);
    if (!p) {
        fprintf(stderr, "ctfread: out of memory\n");
        exit(2);
    }
    return p;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d) {
        fprintf(stderr, "ctfread: out of memory\n");
        exit(2);
    }
    return d;
}

/* ---------------------------------------------------------------- metadata: tokens */

enum { K_IDENT, K_NUM, K_STR, K_PUNCT, K_END };

struct token {
    int kind;
    char *text;
};

struct parser {
    struct token *tok;
    size_t n, at;
    struct trace *tr;
    char *why;
    size_t why_size;
    int failed;
    struct {
        char *name;
        struct ctfread_type *type;
    } * aliases; /* typealias names, "struct x" ... */
    size_t n_aliases;
};

static int fail(struct parser *p, const char *fmt, ...)
{
    if (!p->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->why, p->why_size, fmt, ap);
        va_end(ap);
        p->failed = 1;
    }
    return -1;
}

static int lex(const char *s, size_t len, struct parser *p)
{
    size_t cap = 1024, i = 0;
    p->tok = xcalloc(cap, sizeof *p->tok);
    while (i < len) {
        char c = s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0') {
            i++;
            continue;
        }
        if (c == '/' && i + 1 < len && s[i + 1] == '*') {
            const char *e = memmem(s + i + 2, len - i - 2, "*/", 2);
            if (!e)
                return fail(p, "metadata: unterminated comment");
            i = (size_t)(e - s) + 2;
            continue;
        }
        if (c == '/' && i + 1 < len && s[i + 1] == '/') {
            while (i < len && s[i] != '\n')
                i++;
            continue;
        }
        if (p->n + 1 >= cap) { /* new slots zeroed: after a failure every text is a string or NULL */
            p->tok = xrealloc(p->tok, 2 * cap * sizeof *p->tok);
            memset(p->tok + cap, 0, cap * sizeof *p->tok);
            cap *= 2;
        }
        struct token *t = &p->tok[p->n++];
        size_t b = i;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            while (i < len && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_' ||
                               (s[i] >= '0' && s[i] <= '9')))
                i++;
            t->kind = K_IDENT;
        } else if ((c >= '0' && c <= '9') || (c == '-' && i + 1 < len && s[i + 1] >= '0' && s[i + 1] <= '9')) {
            i++;
            while (i < len &&
                   ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
                i++;
            t->kind = K_NUM;
        } else if (c == '"') {
            i++;
            while (i < len && s[i] != '"') {
                if (s[i] == '\\')
                    i++;
                i++;
            }
            if (i >= len)
                return fail(p, "metadata: unterminated string");
            t->kind = K_STR;
            t->text = strndup(s + b + 1, i - b - 1);
            i++;
            continue;
        } else if (c == ':' && i + 1 < len && s[i + 1] == '=') {
            i += 2;
            t->kind = K_PUNCT;
        } else if (c == '.' && i + 2 < len && s[i + 1] == '.' && s[i + 2] == '.') {
            i += 3;
            t->kind = K_PUNCT;
        } else {
            i++;
            t->kind = K_PUNCT;
        }
        t->text = strndup(s + b, i - b);
    }
    p->tok[p->n].kind = K_END;
    p->tok[p->n].text = xstrdup("");
    return 0;
}

static struct token *peek(struct parser *p, size_t k) { return p->at + k < p->n ? &p->tok[p->at + k] : &p->tok[p->n]; }

static int is(struct parser *p, size_t k, const char *text)
{
    struct token *t = peek(p, k);
    return t->kind != K_END && t->kind != K_STR && !strcmp(t->text, text);
}

static int expect(struct parser *p, const char *text)
{
    if (!is(p, 0, text))
        return fail(p, "metadata: expected '%s' before '%s'", text, peek(p, 0)->text);
    p->at++;
    return 0;
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    *v = strtoull(s, &end, 0);
    return errno || *end ? -1 : 0;
}

static int parse_i64(const char *s, int64_t *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 0);
    return errno || *end ? -1 : 0;
}

/* An attribute's value, as babeltrace2's grammar takes it: one number, string or name, or a dotted
 * name ("clock.monotonic.value"); anything more before the ';' ("6 4", "0 garbage") is refused, as
 * babeltrace2 refuses it. NULL on error. */
static char *value(struct parser *p)
{
    char buf[512] = "";
    size_t len = 0;
    struct token *first = peek(p, 0);
    if (first->kind != K_IDENT && first->kind != K_NUM && first->kind != K_STR) {
        fail(p, "metadata: a value is missing before '%s'", first->text);
        return NULL;
    }
    len = (size_t)snprintf(buf, sizeof buf, "%s", first->text);
    p->at++;
    while (first->kind == K_IDENT && is(p, 0, ".") && peek(p, 1)->kind == K_IDENT) {
        len += (size_t)snprintf(buf + len, len < sizeof buf ? sizeof buf - len : 0, ".%s", peek(p, 1)->text);
        p->at += 2;
    }
    if (!is(p, 0, ";") && !is(p, 0, "}") && !is(p, 0, ",")) {
        fail(p, "metadata: '%s' after the value '%s' (expected ';')", peek(p, 0)->text, first->text);
        return NULL;
    }
    if (len >= sizeof buf) {
        fail(p, "metadata: a value too long near '%s'", first->text);
        return NULL;
    }
    return xstrdup(buf);
}

/* true/false as babeltrace2 reads them (TRUE, 1 and FALSE, 0 too); -1 for anything else. */
static int bool_value(const char *v)
{
    if (!strcmp(v, "true") || !strcmp(v, "TRUE") || !strcmp(v, "1"))
        return 1;
    if (!strcmp(v, "false") || !strcmp(v, "FALSE") || !strcmp(v, "0"))
        return 0;
    return -1;
}

/* An integer's base as babeltrace2 accepts it. */
static int base_ok(const char *v)
{
    static const char *const ok[] = { "2",   "8", "10", "16", "decimal", "dec", "d", "i",      "u", "hexadecimal",
                                      "hex", "x", "X",  "p",  "octal",   "oct", "o", "binary", "b", NULL };
    for (int i = 0; ok[i]; i++)
        if (!strcmp(v, ok[i]))
            return 1;
    return 0;
}

/* A CTF uuid: "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of hex digits; 0 when it is not one. */
static int uuid_parse(const char *v, uint8_t out[16])
{
    uint8_t u[16];
    if (strlen(v) != 36)
        return 0;
    for (int i = 0, k = 0; i < 36; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash != (v[i] == '-') || (!dash && !isxdigit((unsigned char)v[i])))
            return 0;
        if (dash)
            continue;
        int x = isdigit((unsigned char)v[i]) ? v[i] - '0' : tolower((unsigned char)v[i]) - 'a' + 10;
        u[k / 2] = (uint8_t)(k % 2 ? (u[k / 2] << 4) | x : x);
        k++;
    }
    if (out)
        memcpy(out, u, sizeof u);
    return 1;
}

/* A dotted key ("packet.header") up to '=' or ':='. */
static char *key(struct parser *p)
{
    char buf[256] = "";
    size_t len = 0;
    while (peek(p, 0)->kind == K_IDENT || is(p, 0, ".")) {
        len += (size_t)snprintf(buf + len, len < sizeof buf ? sizeof buf - len : 0, "%s", peek(p, 0)->text);
        p->at++;
    }
    if (!len || len >= sizeof buf) {
        fail(p, "metadata: expected a name before '%s'", peek(p, 0)->text);
        return NULL;
    }
    return xstrdup(buf);
}

/* ---------------------------------------------------------------- metadata: types */

static struct ctfread_type *new_type(struct parser *p, enum tkind kind)
{
    struct ctfread_type *t = xcalloc(1, sizeof *t);
    t->kind = kind;
    t->next_alloc = p->tr->types;
    p->tr->types = t;
    return t;
}

static void add_alias(struct parser *p, const char *name, struct ctfread_type *t)
{
    p->aliases = xrealloc(p->aliases, (p->n_aliases + 1) * sizeof *p->aliases);
    p->aliases[p->n_aliases].name = xstrdup(name);
    p->aliases[p->n_aliases].type = t;
    p->n_aliases++;
}

static struct ctfread_type *find_alias(struct parser *p, const char *name)
{
    for (size_t i = p->n_aliases; i-- > 0;)
        if (!strcmp(p->aliases[i].name, name))
            return p->aliases[i].type;
    return NULL;
}

static const char *stripped(const char *name) { return name[0] == '_' ? name + 1 : name; }

static struct ctfread_type *parse_type(struct parser *p);

static struct ctfread_type *parse_integer(struct parser *p)
{
    struct ctfread_type *t = new_type(p, T_INT);
    int have_align = 0;
    if (expect(p, "{"))
        return NULL;
    while (!is(p, 0, "}")) {
        char *k = key(p), *v = NULL;
        if (!k || expect(p, "=") || !(v = value(p)) || expect(p, ";")) {
            free(k);
            free(v);
            return NULL;
        }
        uint64_t n;
        if (!strcmp(k, "size")) {
            if (parse_u64(v, &n) || !n || n > 64)
                fail(p, "metadata: integer size %s", v);
            t->size = (unsigned)n;
        } else if (!strcmp(k, "align")) {
            if (parse_u64(v, &n) || !n || (n & (n - 1)))
                fail(p, "metadata: integer align %s", v);
            t->align = (unsigned)n;
            have_align = 1;
        } else if (!strcmp(k, "signed")) {
            if (bool_value(v) < 0)
                fail(p, "metadata: integer signed = %s is not true or false", v);
            t->is_signed = bool_value(v) == 1;
        } else if (!strcmp(k, "byte_order")) {
            if (strcmp(v, "le") && strcmp(v, "native") && strcmp(v, "little_endian"))
                fail(p, "unsupported: byte_order %s", v);
        } else if (!strcmp(k, "encoding")) {
            if (strcmp(v, "UTF8") && strcmp(v, "utf8") && strcmp(v, "ASCII") && strcmp(v, "ascii") &&
                strcmp(v, "none") && strcmp(v, "NONE"))
                fail(p, "metadata: integer encoding %s", v);
            t->is_text = !strcmp(v, "UTF8") || !strcmp(v, "ASCII") || !strcmp(v, "utf8") || !strcmp(v, "ascii");
        } else if (!strcmp(k, "base")) {
            if (!base_ok(v))
                fail(p, "metadata: integer base %s", v);
        } else if (!strcmp(k, "map")) {
            t->maps_clock = 1;
        }
        free(k);
        free(v);
        if (p->failed)
            return NULL;
    }
    p->at++;
    if (!t->size)
        return fail(p, "metadata: integer without size"), NULL;
    if (!have_align)
        t->align = t->size % 8 ? 1 : 8;
    return t;
}

static struct ctfread_type *parse_string(struct parser *p)
{
    struct ctfread_type *t = new_type(p, T_STRING);
    t->align = 8;
    if (is(p, 0, "{")) {
        p->at++;
        while (!is(p, 0, "}") && peek(p, 0)->kind != K_END)
            p->at++;
        if (expect(p, "}"))
            return NULL;
    }
    return t;
}

static struct ctfread_type *parse_enum(struct parser *p)
{
    char named[300] = "";
    if (peek(p, 0)->kind == K_IDENT) {
        snprintf(named, sizeof named, "enum %s", peek(p, 0)->text);
        p->at++;
        if (!is(p, 0, ":") && !is(p, 0, "{")) {
            struct ctfread_type *t = find_alias(p, named);
            return t ? t : (fail(p, "metadata: unknown %s", named), NULL);
        }
    }
    struct ctfread_type *t = new_type(p, T_ENUM), *c;
    if (is(p, 0, ":")) {
        p->at++;
        c = parse_type(p);
    } else {
        c = find_alias(p, "int");
        if (!c)
            return fail(p, "unsupported: enumeration without a container type"), NULL;
    }
    if (!c)
        return NULL;
    if (c->kind != T_INT)
        return fail(p, "metadata: enumeration container is not an integer"), NULL;
    t->container = c;
    t->size = c->size;
    t->align = c->align;
    t->is_signed = c->is_signed;
    t->maps_clock = c->maps_clock;
    if (expect(p, "{"))
        return NULL;
    int64_t next = 0;
    while (!is(p, 0, "}")) {
        struct token *lt = peek(p, 0);
        if (lt->kind != K_IDENT && lt->kind != K_STR)
            return fail(p, "metadata: enumeration label expected before '%s'", lt->text), NULL;
        struct enum_entry e = { .label = NULL, .lo = next, .hi = next }; /* label copied once it is kept */
        const char *label = lt->text;
        p->at++;
        if (is(p, 0, "=")) {
            p->at++;
            if (peek(p, 0)->kind != K_NUM || parse_i64(peek(p, 0)->text, &e.lo))
                return fail(p, "metadata: enumeration value '%s'", peek(p, 0)->text), NULL;
            p->at++;
            e.hi = e.lo;
            if (is(p, 0, "...")) {
                p->at++;
                if (peek(p, 0)->kind != K_NUM || parse_i64(peek(p, 0)->text, &e.hi))
                    return fail(p, "metadata: enumeration value '%s'", peek(p, 0)->text), NULL;
                p->at++;
            }
        }
        next = e.hi + 1;
        e.label = xstrdup(label);
        t->entries = xrealloc(t->entries, (t->n_entries + 1) * sizeof *t->entries);
        t->entries[t->n_entries++] = e;
        if (is(p, 0, ","))
            p->at++;
        else if (!is(p, 0, "}"))
            return fail(p, "metadata: expected ',' or '}' in an enumeration"), NULL;
    }
    p->at++;
    if (named[0])
        add_alias(p, named, t);
    return t;
}

static int parse_members(struct parser *p, struct ctfread_type *t);

/* A copy of a named struct or variant, for a use that changes it (an alignment, a tag); it owns its
 * members (their types stay shared). */
static struct ctfread_type *copy_type(struct parser *p, const struct ctfread_type *ref)
{
    struct ctfread_type *t = new_type(p, ref->kind);
    struct ctfread_type *keep = t->next_alloc;
    *t = *ref;
    t->next_alloc = keep;
    t->entries = NULL;
    t->n_entries = 0;
    t->tag_name = ref->tag_name ? xstrdup(ref->tag_name) : NULL;
    t->fixed_off = NULL;
    t->n_fixed = 0;
    t->fixed_bits = 0;
    t->members = xcalloc(ref->n_members, sizeof *t->members);
    for (size_t i = 0; i < ref->n_members; i++) {
        t->members[i] = ref->members[i];
        t->members[i].name = xstrdup(ref->members[i].name);
        t->members[i].option_of_entry = NULL;
        t->members[i].tag_type = NULL;
        t->members[i].tag = -1;
    }
    return t;
}

/* struct [NAME] [{ members }] [align(N)] and variant [NAME] [<tag>] [{ options }] */
static struct ctfread_type *parse_compound(struct parser *p, enum tkind kind)
{
    const char *word = kind == T_STRUCT ? "struct" : "variant";
    char named[300] = "", *tag = NULL;
    if (peek(p, 0)->kind == K_IDENT) {
        snprintf(named, sizeof named, "%s %s", word, peek(p, 0)->text);
        p->at++;
    }
    if (kind == T_VARIANT && is(p, 0, "<")) {
        p->at++;
        tag = key(p);
        if (!tag || expect(p, ">"))
            return free(tag), NULL;
    }
    struct ctfread_type *t;
    int referenced = !is(p, 0, "{");
    if (referenced) {
        if (!named[0])
            return fail(p, "metadata: %s without a body or a name", word), NULL;
        struct ctfread_type *ref = find_alias(p, named);
        if (!ref)
            return free(tag), fail(p, "metadata: unknown %s", named), NULL;
        if (!tag)
            t = ref;
        else { /* a named variant given its tag here: a copy that carries it */
            t = copy_type(p, ref);
            free(t->tag_name);
            t->tag_name = tag;
            tag = NULL;
        }
    } else {
        t = new_type(p, kind);
        t->tag_name = tag;
        tag = NULL;
        t->align = 1;
        p->at++;
        if (parse_members(p, t))
            return NULL;
        if (named[0])
            add_alias(p, named, t);
    }
    free(tag);
    if (kind == T_STRUCT && is(p, 0, "align")) {
        uint64_t a;
        p->at++;
        if (expect(p, "(") || peek(p, 0)->kind != K_NUM || parse_u64(peek(p, 0)->text, &a) || !a || (a & (a - 1)))
            return fail(p, "metadata: struct align"), NULL;
        p->at++;
        if (expect(p, ")"))
            return NULL;
        if (a > t->align) { /* a named struct used with more alignment: a copy that has it */
            if (referenced)
                t = copy_type(p, t);
            t->align = (unsigned)a;
        }
    }
    return t;
}

/* A type alias's name: the longest run of identifiers that names a known alias. */
static struct ctfread_type *parse_alias_ref(struct parser *p, int leave_declarator)
{
    size_t words = 0;
    while (peek(p, words)->kind == K_IDENT)
        words++;
    if (leave_declarator && words)
        words--;
    for (size_t k = words; k > 0; k--) {
        char name[512] = "";
        size_t len = 0;
        for (size_t i = 0; i < k; i++)
            len += (size_t)snprintf(name + len, sizeof name - len, "%s%s", i ? " " : "", peek(p, i)->text);
        struct ctfread_type *t = find_alias(p, name);
        if (t) {
            p->at += k;
            return t;
        }
    }
    return fail(p, "unsupported: type '%s'", peek(p, 0)->text), NULL;
}

static struct ctfread_type *parse_type_in(struct parser *p, int leave_declarator)
{
    struct token *t = peek(p, 0);
    if (t->kind != K_IDENT)
        return fail(p, "metadata: expected a type before '%s'", t->text), NULL;
    if (!strcmp(t->text, "integer")) {
        p->at++;
        return parse_integer(p);
    }
    if (!strcmp(t->text, "string")) {
        p->at++;
        return parse_string(p);
    }
    if (!strcmp(t->text, "enum")) {
        p->at++;
        return parse_enum(p);
    }
    if (!strcmp(t->text, "struct")) {
        p->at++;
        return parse_compound(p, T_STRUCT);
    }
    if (!strcmp(t->text, "variant")) {
        p->at++;
        return parse_compound(p, T_VARIANT);
    }
    if (!strcmp(t->text, "floating_point"))
        return fail(p, "unsupported: floating_point"), NULL;
    return parse_alias_ref(p, leave_declarator);
}

static struct ctfread_type *parse_type(struct parser *p) { return parse_type_in(p, 0); }

static int parse_typealias(struct parser *p)
{
    struct ctfread_type *t = parse_type(p);
    if (!t || expect(p, ":="))
        return -1;
    char name[512] = "";
    size_t len = 0;
    while (peek(p, 0)->kind == K_IDENT) {
        len += (size_t)snprintf(name + len, sizeof name - len, "%s%s", len ? " " : "", peek(p, 0)->text);
        p->at++;
    }
    if (!len)
        return fail(p, "metadata: typealias without a name");
    add_alias(p, name, t);
    return expect(p, ";");
}

/* Members (or options) up to the closing brace, which is consumed. */
static int parse_members(struct parser *p, struct ctfread_type *t)
{
    while (!is(p, 0, "}")) {
        if (peek(p, 0)->kind == K_END)
            return fail(p, "metadata: unterminated structure");
        if (is(p, 0, "typealias")) {
            p->at++;
            if (parse_typealias(p))
                return -1;
            continue;
        }
        struct ctfread_type *mt = parse_type_in(p, 1);
        if (!mt)
            return -1;
        do { /* TYPE a, b[2]; */
            if (peek(p, 0)->kind != K_IDENT)
                return fail(p, "metadata: member name expected before '%s'", peek(p, 0)->text);
            /* the name is copied when the member joins the type (which frees it): no leak on failure */
            struct member m = { .name = NULL, .type = mt, .tag = -1 };
            const char *name = stripped(peek(p, 0)->text);
            p->at++;
            /* subscripts apply outermost first: a[2][3] is 2 arrays of 3 */
            struct ctfread_type *subs[8];
            int n_subs = 0;
            while (is(p, 0, "[")) {
                p->at++;
                if (n_subs == 8)
                    return fail(p, "unsupported: more than 8 subscripts");
                struct ctfread_type *a;
                if (peek(p, 0)->kind == K_NUM) {
                    a = new_type(p, T_ARRAY);
                    if (parse_u64(peek(p, 0)->text, &a->length))
                        return fail(p, "metadata: array length '%s'", peek(p, 0)->text);
                    p->at++;
                } else {
                    a = new_type(p, T_SEQUENCE);
                    char *len_name = key(p);
                    if (!len_name)
                        return -1;
                    if (strchr(len_name, '.')) {
                        fail(p, "unsupported: sequence length '%s' outside its structure", len_name);
                        free(len_name);
                        return -1;
                    }
                    a->tag_name = xstrdup(stripped(len_name)); /* the type owns it */
                    free(len_name);
                }
                subs[n_subs++] = a;
                if (expect(p, "]"))
                    return -1;
            }
            struct ctfread_type *inner = mt;
            for (int i = n_subs; i-- > 0;) {
                subs[i]->container = inner;
                subs[i]->align = inner->align;
                inner = subs[i];
            }
            m.type = inner;
            m.name = xstrdup(name);
            if (n_subs == 1 && inner->container->kind == T_INT && inner->container->is_text &&
                inner->container->size == 8)
                m.is_char_array = 1;
            m.is_id = !strcmp(m.name, "id");
            m.maps_clock = inner->kind == T_INT && inner->maps_clock;
            t->members = xrealloc(t->members, (t->n_members + 1) * sizeof *t->members);
            t->members[t->n_members++] = m;
            if (t->n_members > MAX_MEMBERS)
                return fail(p, "unsupported: more than %d members", MAX_MEMBERS);
            if (t->kind == T_STRUCT && inner->align > t->align && inner->kind != T_VARIANT)
                t->align = inner->align;
            if (!is(p, 0, ","))
                break;
            p->at++;
        } while (1);
        if (expect(p, ";"))
            return -1;
    }
    p->at++;
    return 0;
}

/* A struct's leading integers of 8, 16, 32 or 64 bits lie at offsets known before decoding when the
 * struct starts on a byte (decode_struct checks) and none is aligned more than the struct or a byte:
 * decode_struct reads them without walking the types. */
static void fixed_layout(struct ctfread_type *t)
{
    uint64_t off = 0;
    t->fixed_off = xcalloc(t->n_members, sizeof *t->fixed_off);
    for (t->n_fixed = 0; t->n_fixed < t->n_members; t->n_fixed++) {
        const struct ctfread_type *mt = t->members[t->n_fixed].type;
        if ((mt->kind != T_INT && mt->kind != T_ENUM) || mt->align > (t->align > 8 ? t->align : 8) ||
            (mt->size != 8 && mt->size != 16 && mt->size != 32 && mt->size != 64))
            break;
        off = (off + mt->align - 1) & ~(uint64_t)(mt->align - 1);
        t->fixed_off[t->n_fixed] = (uint32_t)off;
        off += mt->size;
    }
    t->fixed_bits = off;
}

/* Variant tags and sequence lengths: earlier members of the same structure. */
static int resolve(struct parser *p, struct ctfread_type *t, int depth)
{
    if (!t || depth > 32)
        return depth > 32 ? fail(p, "unsupported: types nested too deep") : 0;
    if (t->kind == T_ARRAY || t->kind == T_SEQUENCE)
        return resolve(p, t->container, depth + 1);
    if (t->kind != T_STRUCT && t->kind != T_VARIANT)
        return 0;
    if (t->kind == T_STRUCT && !t->fixed_off)
        fixed_layout(t);
    for (size_t i = 0; i < t->n_members; i++) {
        struct member *m = &t->members[i];
        if (resolve(p, m->type, depth + 1))
            return -1;
        const char *tag = m->type->tag_name;
        if (t->kind == T_VARIANT || !tag || (m->type->kind != T_VARIANT && m->type->kind != T_SEQUENCE))
            continue;
        int found = -1;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(t->members[j].name, tag))
                found = (int)j;
        if (found < 0)
            return fail(p, "unsupported: '%s' refers to '%s' outside its structure", m->name, tag);
        m->tag = found;
        const struct ctfread_type *tt = t->members[found].type;
        if (m->type->kind == T_SEQUENCE) {
            if (tt->kind != T_INT && tt->kind != T_ENUM)
                return fail(p, "metadata: sequence length '%s' is not an integer", tag);
            continue;
        }
        if (tt->kind != T_ENUM)
            return fail(p, "metadata: variant tag '%s' is not an enumeration", tag);
        m->tag_type = tt;
        m->option_of_entry = xcalloc(tt->n_entries, sizeof *m->option_of_entry);
        for (size_t e = 0; e < tt->n_entries; e++) {
            m->option_of_entry[e] = -1;
            for (size_t o = 0; o < m->type->n_members; o++)
                if (!strcmp(m->type->members[o].name, stripped(tt->entries[e].label)))
                    m->option_of_entry[e] = (int)o;
        }
    }
    return 0;
}

static int struct_or_null(struct parser *p, struct ctfread_type *t, const char *what)
{
    if (t && t->kind != T_STRUCT)
        return fail(p, "unsupported: %s is not a structure", what);
    return resolve(p, t, 0);
}

static size_t strbuf_need(const struct ctfread_type *t)
{
    size_t n = 0;
    for (size_t i = 0; t && i < t->n_members; i++)
        if (t->members[i].is_char_array)
            n += (t->members[i].type->kind == T_ARRAY ? t->members[i].type->length : 256) + 1;
    return n;
}

/* ---------------------------------------------------------------- metadata: blocks */

static struct stream_class *stream_class(struct trace *tr, uint64_t id, int create)
{
    for (size_t i = 0; i < tr->n_streams; i++)
        if (tr->streams[i].id == id)
            return &tr->streams[i];
    if (!create)
        return NULL;
    tr->streams = xrealloc(tr->streams, (tr->n_streams + 1) * sizeof *tr->streams);
    struct stream_class *sc = &tr->streams[tr->n_streams++];
    memset(sc, 0, sizeof *sc);
    sc->id = id;
    return sc;
}

static int parse_block(struct parser *p, const char *kind)
{
    struct trace *tr = p->tr;
    struct stream_class sc = { 0 };
    struct ctfread_class ec = { 0 };
    struct clock_def ck = { .pub.freq = 1000000000 };
    int rc = -1;
    if (expect(p, "{"))
        goto out;
    while (!is(p, 0, "}")) {
        if (peek(p, 0)->kind == K_END) {
            fail(p, "metadata: unterminated %s block", kind);
            goto out;
        }
        if (is(p, 0, "typealias")) {
            p->at++;
            if (parse_typealias(p))
                goto out;
            continue;
        }
        char *k = key(p);
        if (!k)
            goto out;
        if (is(p, 0, ":=")) {
            p->at++;
            struct ctfread_type *t = parse_type(p);
            if (!t || expect(p, ";")) {
                free(k);
                goto out;
            }
            if (!strcmp(kind, "trace") && !strcmp(k, "packet.header"))
                tr->packet_header = t;
            else if (!strcmp(kind, "stream") && !strcmp(k, "packet.context"))
                sc.packet_context = t;
            else if (!strcmp(kind, "stream") && !strcmp(k, "event.header"))
                sc.event_header = t;
            else if (!strcmp(kind, "stream") && !strcmp(k, "event.context"))
                sc.event_context = t;
            else if (!strcmp(kind, "event") && !strcmp(k, "fields"))
                ec.payload = t;
            else if (!strcmp(kind, "event") && !strcmp(k, "context"))
                ec.context = t;
            else
                fail(p, "unsupported: %s.%s", kind, k);
            free(k);
            if (p->failed)
                goto out;
            continue;
        }
        char *v = NULL;
        if (expect(p, "=") || !(v = value(p)) || expect(p, ";")) {
            free(k);
            free(v);
            goto out;
        }
        uint64_t n = 0;
        int num_ok = !parse_u64(v, &n);
        if (!strcmp(kind, "trace") && !strcmp(k, "byte_order") && strcmp(v, "le"))
            fail(p, "unsupported: trace byte_order %s", v);
        else if (!strcmp(kind, "env") && !strcmp(k, "tracer_name") && !strncmp(v, "lttng", 5))
            tr->lttng = 1;
        else if (!strcmp(kind, "stream") && !strcmp(k, "id"))
            sc.id = n;
        else if (!strcmp(kind, "event") && !strcmp(k, "id"))
            ec.id = n;
        else if (!strcmp(kind, "event") && !strcmp(k, "stream_id"))
            ec.stream_id = n;
        else if (!strcmp(kind, "event") && !strcmp(k, "name")) {
            free(ec.name);
            ec.name = xstrdup(v);
        } else if (!strcmp(kind, "clock") && !strcmp(k, "name")) {
            free(ck.name);
            ck.name = xstrdup(v);
        } else if (!strcmp(kind, "clock") && !strcmp(k, "freq"))
            ck.pub.freq = n;
        else if (!strcmp(kind, "clock") && !strcmp(k, "offset_s")) {
            if (parse_i64(v, &ck.pub.offset_s))
                fail(p, "metadata: clock.offset_s = %s is not a number", v);
        } else if (!strcmp(kind, "clock") && !strcmp(k, "offset"))
            ck.pub.offset_cycles = n;
        else if (!strcmp(kind, "clock") && !strcmp(k, "absolute")) {
            if (bool_value(v) < 0)
                fail(p, "metadata: clock.absolute = %s is not true or false", v);
            ck.pub.origin_is_unix_epoch = bool_value(v) == 1;
        } else if (!strcmp(kind, "clock") && !strcmp(k, "uuid")) {
            if (!uuid_parse(v, ck.pub.uuid))
                fail(p, "metadata: clock.uuid = \"%s\" is not a uuid", v);
            ck.pub.have_uuid = 1;
        } else if (!strcmp(kind, "trace") && !strcmp(k, "uuid") && !uuid_parse(v, NULL))
            fail(p, "metadata: trace.uuid = \"%s\" is not a uuid", v);
        else if (!strcmp(kind, "trace") && !strcmp(k, "major") && (!num_ok || n != 1))
            fail(p, "unsupported: CTF major version %s (this reader reads 1.8)", v);
        else if (!strcmp(kind, "trace") && !strcmp(k, "minor") && (!num_ok || n != 8))
            fail(p, "unsupported: CTF minor version %s (this reader reads 1.8)", v);
        if (!num_ok &&
            (!strcmp(k, "id") || !strcmp(k, "stream_id") || !strcmp(k, "freq") || !strcmp(k, "offset") ||
             (!strcmp(kind, "clock") && !strcmp(k, "precision")) || (!strcmp(kind, "event") && !strcmp(k, "loglevel"))))
            fail(p, "metadata: %s.%s = %s is not a number", kind, k, v);
        free(k);
        free(v);
        if (p->failed)
            goto out;
    }
    p->at++;
    if (expect(p, ";"))
        goto out;
    if (!strcmp(kind, "stream")) {
        struct stream_class *s = stream_class(tr, sc.id, 1);
        s->packet_context = sc.packet_context;
        s->event_header = sc.event_header;
        s->event_context = sc.event_context;
        if (struct_or_null(p, s->packet_context, "packet.context") ||
            struct_or_null(p, s->event_header, "event.header") || struct_or_null(p, s->event_context, "event.context"))
            goto out;
    } else if (!strcmp(kind, "event")) {
        if (!ec.name) {
            fail(p, "metadata: an event without a name");
            goto out;
        }
        if (struct_or_null(p, ec.payload, "event fields") || struct_or_null(p, ec.context, "event context"))
            goto out;
        tr->classes = xrealloc(tr->classes, (tr->n_classes + 1) * sizeof *tr->classes);
        tr->classes[tr->n_classes++] = ec;
        ec.name = NULL; /* the trace owns it now */
    } else if (!strcmp(kind, "clock")) {
        if (!ck.name) {
            fail(p, "metadata: a clock without a name");
            goto out;
        }
        if (!ck.pub.freq) {
            fail(p, "metadata: clock %s has frequency 0", ck.name);
            goto out;
        }
        ck.pub.name = ck.name;
        tr->clocks = xrealloc(tr->clocks, (tr->n_clocks + 1) * sizeof *tr->clocks);
        tr->clocks[tr->n_clocks++] = ck;
        ck.name = NULL;
    } else if (!strcmp(kind, "trace")) {
        if (struct_or_null(p, tr->packet_header, "packet.header"))
            goto out;
    }
    rc = 0;
out:
    free(ec.name);
    free(ck.name);
    return rc;
}

static int parse_metadata(struct parser *p)
{
    /* integer aliases CTF writers rely on without declaring ("int" for enumerations) are not
	 * predeclared: an enumeration without a container is refused instead. */
    while (peek(p, 0)->kind != K_END && !p->failed) {
        struct token *t = peek(p, 0);
        if (t->kind != K_IDENT)
            return fail(p, "metadata: unexpected '%s'", t->text);
        if (!strcmp(t->text, "typealias")) {
            p->at++;
            if (parse_typealias(p))
                return -1;
        } else if (!strcmp(t->text, "trace") || !strcmp(t->text, "env") || !strcmp(t->text, "clock") ||
                   !strcmp(t->text, "stream") || !strcmp(t->text, "event") || !strcmp(t->text, "callsite")) {
            p->at++;
            if (parse_block(p, t->text))
                return -1;
        } else if (!strcmp(t->text, "struct") || !strcmp(t->text, "enum") || !strcmp(t->text, "variant")) {
            if (!parse_type(p) || expect(p, ";"))
                return -1;
        } else {
            return fail(p, "unsupported: top-level '%s'", t->text);
        }
    }
    return p->failed ? -1 : 0;
}

/* The metadata file's text: plain, or the payloads of its metadata packets. */
static char *metadata_text(const char *path, size_t *len, char *why, size_t why_size)
{
    char *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        say(why, why_size, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *raw = xcalloc((size_t)size + 1, 1);
    if (size < 0 || fread(raw, 1, (size_t)size, f) != (size_t)size) {
        say(why, why_size, "cannot read %s", path);
        goto out;
    }
    uint32_t magic = 0;
    if (size >= 4)
        memcpy(&magic, raw, 4);
    if (magic != 0x75D11D57u) {
        text = (char *)raw;
        raw = NULL;
        *len = (size_t)size;
        goto out;
    }
    text = xcalloc((size_t)size + 1, 1);
    *len = 0;
    for (size_t off = 0; off + 37 <= (size_t)size;) {
        uint32_t content_bits, packet_bits;
        memcpy(&magic, raw + off, 4);
        memcpy(&content_bits, raw + off + 24, 4);
        memcpy(&packet_bits, raw + off + 28, 4);
        if (magic != 0x75D11D57u || content_bits < 37 * 8 || content_bits > packet_bits ||
            off + packet_bits / 8 > (size_t)size || packet_bits % 8 || raw[off + 32] || raw[off + 33]) {
            say(why, why_size, "%s: a metadata packet at byte %zu is damaged or compressed", path, off);
            free(text);
            text = NULL;
            goto out;
        }
        memcpy(text + *len, raw + off + 37, content_bits / 8 - 37);
        *len += content_bits / 8 - 37;
        off += packet_bits / 8;
    }
out:
    free(raw);
    fclose(f);
    return text;
}

static int member_index(const struct ctfread_type *t, const char *name)
{
    for (size_t i = 0; t && i < t->n_members; i++)
        if (!strcmp(t->members[i].name, name))
            return (int)i;
    return -1;
}

static int load_trace(struct trace *tr, const char *dir, char *why, size_t why_size)
{
    char path[4096];
    size_t len = 0;
    int rc = CTFREAD_UNSUPPORTED;
    struct parser p = { .tr = tr, .why = why, .why_size = why_size };
    snprintf(path, sizeof path, "%s/metadata", dir);
    tr->dir = xstrdup(dir);
    char *text = metadata_text(path, &len, why, why_size);
    if (!text)
        return CTFREAD_UNSUPPORTED;
    if (lex(text, len, &p) || parse_metadata(&p))
        goto out;
    if (tr->n_clocks > 1) {
        say(why, why_size, "unsupported: %zu clocks", tr->n_clocks);
        goto out;
    }
    if (!tr->n_streams)
        stream_class(tr, 0, 1);
    tr->hdr_magic = member_index(tr->packet_header, "magic");
    tr->hdr_stream_id = member_index(tr->packet_header, "stream_id");
    for (size_t i = 0; i < tr->n_classes; i++) {
        struct ctfread_class *c = &tr->classes[i];
        struct stream_class *sc = stream_class(tr, c->stream_id, 0);
        if (!sc) {
            say(why, why_size, "metadata: event %s names stream %" PRIu64 ", which is not declared", c->name,
                c->stream_id);
            goto out;
        }
        if (c->id >= (1u << 20)) {
            say(why, why_size, "unsupported: event id %" PRIu64, c->id);
            goto out;
        }
        if (c->id >= sc->n_by_id) {
            sc->by_id = xrealloc(sc->by_id, (c->id + 1) * sizeof *sc->by_id);
            memset(sc->by_id + sc->n_by_id, 0, (c->id + 1 - sc->n_by_id) * sizeof *sc->by_id);
            sc->n_by_id = c->id + 1;
        }
        c->sc = sc;
        sc->by_id[c->id] = c;
    }
    for (size_t i = 0; i < tr->n_streams; i++) {
        struct stream_class *sc = &tr->streams[i];
        const struct ctfread_type *pc = sc->packet_context;
        sc->ctx_packet_size = member_index(pc, "packet_size");
        sc->ctx_content_size = member_index(pc, "content_size");
        sc->ctx_ts_begin = member_index(pc, "timestamp_begin");
        sc->ctx_ts_end = member_index(pc, "timestamp_end");
        sc->ctx_discarded = member_index(pc, "events_discarded");
        sc->ctx_cpu = member_index(pc, "cpu_id");
        sc->ctx_seq = member_index(pc, "packet_seq_num");
        sc->discarded_bits = sc->ctx_discarded >= 0 ? pc->members[sc->ctx_discarded].type->size : 0;
        if (sc->ctx_ts_end >= 0) /* the packet's end does not move the clock of its events */
            pc->members[sc->ctx_ts_end].maps_clock = 0;
        sc->clock = tr->n_clocks ? &tr->clocks[0] : NULL; /* at most one clock: checked above */
        if (sc->event_context && sc->event_context->n_members > MAX_MEMBERS) {
            say(why, why_size, "unsupported: event context too large");
            goto out;
        }
        if (strbuf_need(sc->event_context) > MAX_STRBUF) {
            say(why, why_size, "unsupported: character arrays too long");
            goto out;
        }
    }
    for (size_t i = 0; i < tr->n_classes; i++)
        if (tr->classes[i].payload && strbuf_need(tr->classes[i].payload) > MAX_STRBUF) {
            say(why, why_size, "unsupported: character arrays too long");
            goto out;
        }
    for (size_t i = 0; i < tr->n_clocks; i++)
        if (tr->lttng)
            tr->clocks[i].pub.origin_is_unix_epoch = 1;
    rc = CTFREAD_OK;
out:
    for (size_t i = 0; i < p.n; i++)
        free(p.tok[i].text);
    if (p.tok)
        free(p.tok[p.n].text);
    free(p.tok);
    for (size_t i = 0; i < p.n_aliases; i++)
        free(p.aliases[i].name);
    free(p.aliases);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- decoding */

struct cursor {
    const uint8_t *base; /* the stream file */
    uint64_t pos, end;   /* bits from base: where we are, where the packet's content ends */
    struct stream *s;
    int header; /* in an event header: "id" members name the event class */
    uint64_t event_id;
};

static inline int align_to(struct cursor *c, unsigned a)
{
    uint64_t p = (c->pos + a - 1) & ~(uint64_t)(a - 1);
    if (p > c->end)
        return -1;
    c->pos = p;
    return 0;
}

/* size bits, little-endian, from bit pos (the caller checked they lie inside the packet) */
static inline uint64_t load_bits(const uint8_t *base, uint64_t pos, unsigned size)
{
    const uint8_t *b = base + (pos >> 3);
    unsigned shift = (unsigned)(pos & 7);
    uint64_t v;
    if (!shift) {
        switch (size) {
        case 8: return b[0];
        case 16: {
            uint16_t x;
            memcpy(&x, b, 2);
            return x;
        }
        case 32: {
            uint32_t x;
            memcpy(&x, b, 4);
            return x;
        }
        case 64: memcpy(&v, b, 8); return v;
        }
    }
    uint8_t tmp[9] = { 0 };
    memcpy(tmp, b, (shift + size + 7) / 8);
    memcpy(&v, tmp, 8);
    v >>= shift;
    if (shift + size > 64)
        v |= (uint64_t)tmp[8] << (64 - shift);
    return size < 64 ? v & ((1ull << size) - 1) : v;
}

static inline int read_int(struct cursor *c, const struct ctfread_type *t, int64_t *out)
{
    if (align_to(c, t->align) || c->end - c->pos < t->size)
        return -1;
    uint64_t v = load_bits(c->base, c->pos, t->size);
    c->pos += t->size;
    if (t->is_signed && t->size < 64) {
        uint64_t m = 1ull << (t->size - 1);
        v = (v ^ m) - m;
    }
    *out = (int64_t)v;
    return 0;
}

/* CTF's clock update: an N-bit value replaces the clock's low N bits, and a value below the
 * previous low bits means they wrapped once. */
static inline void update_clock(struct stream *s, uint64_t v, unsigned size)
{
    if (size >= 64) {
        s->clock = v;
        return;
    }
    uint64_t mask = (1ull << size) - 1;
    if (v < (s->clock & mask))
        s->clock += mask + 1;
    s->clock = (s->clock & ~mask) | v;
}

static int decode_struct(struct cursor *c, const struct ctfread_type *t, int64_t *ival, const char **sval, char *sb,
                         size_t sb_size);

/* One value of type t (member m's, or an array element's when m is NULL); sib: the variant's tag
 * value or the sequence's length. Integers land in *iv, strings and character arrays in *sv (text of
 * arrays copied to *sb) when given. */
static int decode_one(struct cursor *c, const struct member *m, const struct ctfread_type *t, int64_t sib, int64_t *iv,
                      const char **sv, char **sb, size_t *sb_left)
{
    switch (t->kind) {
    case T_INT:
    case T_ENUM:
        if (read_int(c, t, iv))
            return -1;
        if (m && m->maps_clock)
            update_clock(c->s, (uint64_t)*iv, t->size);
        if (m && m->is_id && c->header)
            c->event_id = (uint64_t)*iv;
        return 0;
    case T_STRING: {
        if (align_to(c, 8))
            return -1;
        const uint8_t *b = c->base + c->pos / 8;
        const uint8_t *e = memchr(b, 0, (size_t)((c->end - c->pos) / 8));
        if (!e)
            return -1;
        if (sv)
            *sv = (const char *)b;
        c->pos += (uint64_t)(e - b + 1) * 8;
        return 0;
    }
    case T_STRUCT: {
        int64_t vals[t->n_members ? t->n_members : 1];
        return decode_struct(c, t, vals, NULL, NULL, 0);
    }
    case T_VARIANT: {
        if (!m || !m->tag_type)
            return -1;
        size_t e;
        for (e = 0; e < m->tag_type->n_entries; e++)
            if (sib >= m->tag_type->entries[e].lo && sib <= m->tag_type->entries[e].hi)
                break;
        if (e == m->tag_type->n_entries || m->option_of_entry[e] < 0)
            return -1;
        const struct member *o = &t->members[m->option_of_entry[e]];
        int64_t ov;
        if (o->type->kind == T_VARIANT || o->type->kind == T_SEQUENCE)
            return -1;
        return decode_one(c, o, o->type, 0, &ov, NULL, NULL, NULL);
    }
    case T_ARRAY:
    case T_SEQUENCE: {
        if (t->kind == T_SEQUENCE && (!m || m->tag < 0 || sib < 0))
            return -1;
        uint64_t n = t->kind == T_ARRAY ? t->length : (uint64_t)sib;
        if (align_to(c, t->align))
            return -1;
        if (m && m->is_char_array) {
            if (n > (c->end - c->pos) / 8)
                return -1;
            const char *b = (const char *)(c->base + c->pos / 8);
            if (sv && sb && *sb_left <= n)
                return -1; /* text longer than the event's buffer: libbabeltrace2 reads it whole */
            if (sv && sb) {
                size_t k = strnlen(b, (size_t)n);
                memcpy(*sb, b, k);
                (*sb)[k] = 0;
                *sv = *sb;
                *sb += k + 1;
                *sb_left -= k + 1;
            }
            c->pos += n * 8;
            return 0;
        }
        const struct ctfread_type *et = t->container;
        if (et->kind == T_INT && et->size % et->align == 0) { /* packed: skip at once */
            if (n > (c->end - c->pos) / et->size)
                return -1;
            c->pos += n * et->size;
            return 0;
        }
        if (et->kind == T_VARIANT || et->kind == T_SEQUENCE || n > c->end - c->pos + 1)
            return -1;
        for (uint64_t i = 0; i < n; i++) {
            int64_t x;
            if (decode_one(c, NULL, et, 0, &x, NULL, NULL, NULL))
                return -1;
        }
        return 0;
    }
    }
    return -1;
}

static int decode_struct(struct cursor *c, const struct ctfread_type *t, int64_t *ival, const char **sval, char *sb,
                         size_t sb_size)
{
    if (align_to(c, t->align))
        return -1;
    size_t i = 0;
    if (t->n_fixed && !(c->pos & 7) && c->end - c->pos >= t->fixed_bits) {
        const uint8_t *b = c->base + c->pos / 8;
        for (; i < t->n_fixed; i++) {
            const struct member *m = &t->members[i];
            const struct ctfread_type *mt = m->type;
            uint64_t v = load_bits(b, t->fixed_off[i], mt->size);
            if (mt->is_signed && mt->size < 64) {
                uint64_t sign = 1ull << (mt->size - 1);
                v = (v ^ sign) - sign;
            }
            ival[i] = (int64_t)v;
            if (sval)
                sval[i] = NULL;
            if (m->maps_clock)
                update_clock(c->s, v, mt->size);
            if (m->is_id && c->header)
                c->event_id = v;
        }
        c->pos += t->fixed_bits;
    }
    for (; i < t->n_members; i++) {
        const struct member *m = &t->members[i];
        ival[i] = 0;
        if (sval)
            sval[i] = NULL;
        if (decode_one(c, m, m->type, m->tag >= 0 ? ival[m->tag] : 0, &ival[i], sval ? &sval[i] : NULL, sb ? &sb : NULL,
                       &sb_size))
            return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- packets */

static int open_packet(struct ctfread_reader *r, struct stream *s, int record, char *why, size_t why_size)
{
    struct trace *tr = s->tr;
    size_t left = s->len - s->pkt;
    struct cursor c = { .base = s->data, .pos = (uint64_t)s->pkt * 8, .end = (uint64_t)s->len * 8, .s = s };
    int64_t *v = s->scratch_ival;
    uint64_t stream_id = 0;
    if (tr->packet_header) {
        if (decode_struct(&c, tr->packet_header, v, NULL, NULL, 0))
            goto bad;
        if (tr->hdr_magic >= 0 && (uint32_t)v[tr->hdr_magic] != 0xC1FC1FC1u)
            goto bad;
        if (tr->hdr_stream_id >= 0)
            stream_id = (uint64_t)v[tr->hdr_stream_id];
    }
    struct stream_class *sc = stream_class(tr, stream_id, 0);
    if (!sc)
        goto bad;
    uint64_t packet_bits = (uint64_t)left * 8, content_bits = 0;
    int have_content = 0;
    if (sc->packet_context) {
        if (decode_struct(&c, sc->packet_context, v, NULL, NULL, 0))
            goto bad;
        if (sc->ctx_packet_size >= 0)
            packet_bits = (uint64_t)v[sc->ctx_packet_size];
        if (sc->ctx_content_size >= 0) {
            content_bits = (uint64_t)v[sc->ctx_content_size];
            have_content = 1;
        }
    }
    if (!have_content)
        content_bits = packet_bits;
    if (packet_bits % 8 == 0 && packet_bits / 8 > left && c.pos <= (uint64_t)s->len * 8) {
        say(why, why_size,
            "%s: the stream is cut short: the packet at byte %zu declares %" PRIu64
            " bytes, the file ends %zu bytes after its start",
            s->path, s->pkt, packet_bits / 8, left);
        return -CTFREAD_FALLBACK;
    }
    if (packet_bits % 8 || !packet_bits || packet_bits / 8 > left || content_bits > packet_bits ||
        c.pos > (uint64_t)s->pkt * 8 + content_bits)
        goto bad;
    int cpu = sc->ctx_cpu >= 0 ? (int)v[sc->ctx_cpu] : -1;
    uint64_t disc = sc->ctx_discarded >= 0 ? (uint64_t)v[sc->ctx_discarded] : 0;
    uint64_t ts_end = sc->ctx_ts_end >= 0 ? (uint64_t)v[sc->ctx_ts_end] : 0;
    uint64_t seq = sc->ctx_seq >= 0 ? (uint64_t)v[sc->ctx_seq] : 0;
    if (sc->ctx_seq >= 0 && s->have_prev && seq != s->prev_seq + 1) {
        say(why, why_size, "unsupported: %s: packet sequence jumps from %" PRIu64 " to %" PRIu64 " (discarded packets)",
            s->path, s->prev_seq, seq);
        return -CTFREAD_UNSUPPORTED;
    }
    if (sc->ctx_discarded >= 0) {
        uint64_t mask = sc->discarded_bits >= 64 ? ~0ull : (1ull << sc->discarded_bits) - 1;
        uint64_t lost = (disc - (s->have_prev ? s->prev_discarded : 0)) & mask;
        if (lost && (!s->have_prev || sc->ctx_ts_end < 0)) {
            say(why, why_size, "unsupported: %s: events discarded before its first packet", s->path);
            return -CTFREAD_UNSUPPORTED;
        }
        if (lost && record) {
            if (r->n_disc == r->cap_disc) {
                r->cap_disc = r->cap_disc ? 2 * r->cap_disc : 16;
                r->disc = xrealloc(r->disc, r->cap_disc * sizeof *r->disc);
            }
            r->disc[r->n_disc++] = (struct ctfread_discarded){ lost, s->prev_ts_end, ts_end };
        }
    }
    s->sc = sc;
    s->cpu = cpu;
    s->pkt_bytes = packet_bits / 8;
    s->content_end = (uint64_t)s->pkt * 8 + content_bits;
    s->pos = c.pos;
    s->have_prev = 1;
    s->prev_discarded = disc;
    s->prev_ts_end = ts_end;
    s->prev_seq = seq;
    return 0;
bad:
    say(why, why_size, "%s: the packet at byte %zu does not decode", s->path, s->pkt);
    return -CTFREAD_FALLBACK;
}

/* Give back the mapped pages before byte `upto` (whole MiBs of them): the reader's memory then stays
 * flat however long the trace, as its column output does. */
static void release(struct stream *s, size_t upto)
{
    const size_t step = 1 << 20;
    upto &= ~(step - 1);
    if (upto > s->released) {
        madvise((void *)(s->data + s->released), upto - s->released, MADV_DONTNEED);
        s->released = upto;
    }
}

/* Every packet of a stream, end to end, before any of its events is read. */
static int check_stream(struct ctfread_reader *r, struct stream *s, char *why, size_t why_size)
{
    int rc = 0;
    for (s->pkt = 0; s->pkt < s->len; s->pkt += s->pkt_bytes) {
        if ((rc = open_packet(r, s, 0, why, why_size)))
            break;
        release(s, s->pkt);
    }
    madvise((void *)s->data, s->len, MADV_DONTNEED);
    s->released = 0;
    s->pkt = 0;
    s->have_prev = 0;
    s->pkt_bytes = 0;
    s->content_end = 0;
    s->pos = 0;
    s->clock = 0;
    return rc;
}

/* The stream's next event into s->ev: 1, 0 at its end, -CTFREAD_FALLBACK. */
static int stream_next(struct ctfread_reader *r, struct stream *s, char *why, size_t why_size)
{
    while (s->pos >= s->content_end) {
        if (s->pkt_bytes)
            s->pkt += s->pkt_bytes;
        release(s, s->pkt);
        if (s->pkt >= s->len) {
            s->done = 1;
            return 0;
        }
        int rc = open_packet(r, s, 1, why, why_size);
        if (rc)
            return rc;
    }
    struct stream_class *sc = s->sc;
    struct cursor c = { .base = s->data, .pos = s->pos, .end = s->content_end, .s = s, .header = 1 };
    if (sc->event_header && decode_struct(&c, sc->event_header, s->scratch_ival, NULL, NULL, 0))
        goto bad;
    c.header = 0;
    struct ctfread_class *cls = c.event_id < sc->n_by_id ? sc->by_id[c.event_id] : NULL;
    if (!cls)
        goto bad;
    s->ev.common.type = sc->event_context;
    if (sc->event_context &&
        decode_struct(&c, sc->event_context, s->ival[1], s->sval[1], s->strbuf[1], sizeof s->strbuf[1]))
        goto bad;
    if (cls->context && decode_struct(&c, cls->context, s->scratch_ival, NULL, NULL, 0))
        goto bad;
    s->ev.payload.type = cls->payload;
    if (cls->payload && decode_struct(&c, cls->payload, s->ival[0], s->sval[0], s->strbuf[0], sizeof s->strbuf[0]))
        goto bad;
    s->pos = c.pos;
    s->ev.ts = s->clock;
    s->ev.cpu = s->cpu;
    s->ev.cls = cls;
    return 1;
bad:
    say(why, why_size, "%s: an event at bit %" PRIu64 " of the packet at byte %zu does not decode", s->path,
        s->pos - (uint64_t)s->pkt * 8, s->pkt);
    return -CTFREAD_FALLBACK;
}

/* ---------------------------------------------------------------- the reader */

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int add_streams(struct ctfread_reader *r, struct trace *tr, char *why, size_t why_size)
{
    DIR *d = opendir(tr->dir);
    if (!d) {
        say(why, why_size, "cannot list %s: %s", tr->dir, strerror(errno));
        return -CTFREAD_UNSUPPORTED;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "metadata"))
            continue;
        names = xrealloc(names, (n + 1) * sizeof *names);
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", tr->dir, names[i]);
        if (rc || stat(path, &st) || !S_ISREG(st.st_mode) || !st.st_size)
            continue;
        int fd = open(path, O_RDONLY);
        void *map = fd < 0 ? MAP_FAILED : mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (fd >= 0)
            close(fd);
        if (map == MAP_FAILED) {
            say(why, why_size, "cannot map %s: %s", path, strerror(errno));
            rc = -CTFREAD_UNSUPPORTED;
            continue;
        }
        madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
        r->streams = xrealloc(r->streams, (r->n_streams + 1) * sizeof *r->streams);
        struct stream *s = &r->streams[r->n_streams++];
        memset(s, 0, sizeof *s);
        s->tr = tr;
        s->path = xstrdup(path);
        s->data = map;
        s->len = (size_t)st.st_size;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int ctfread_open(char *const *dirs, int n_dirs, struct ctfread_reader **out, char *why, size_t why_size)
{
    struct ctfread_reader *r = xcalloc(1, sizeof *r);
    int rc = CTFREAD_OK;
    *out = r;
    why[0] = 0;
    r->traces = xcalloc((size_t)n_dirs, sizeof *r->traces);
    for (int i = 0; i < n_dirs && !rc; i++) {
        r->n_traces++;
        rc = load_trace(&r->traces[i], dirs[i], why, why_size);
        if (!rc)
            rc = -add_streams(r, &r->traces[i], why, why_size);
    }
    /* streams moved while the array grew: their buffers are set only now */
    for (size_t i = 0; i < r->n_streams && !rc; i++) {
        struct stream *s = &r->streams[i];
        s->ev.payload.ival = s->ival[0];
        s->ev.payload.sval = s->sval[0];
        s->ev.common.ival = s->ival[1];
        s->ev.common.sval = s->sval[1];
        rc = -check_stream(r, s, why, why_size);
    }
    return rc;
}

int ctfread_next(struct ctfread_reader *r, const struct ctfread_event **ev, char *why, size_t why_size)
{
    if (!r->started) {
        r->started = 1;
        for (size_t i = 0; i < r->n_streams; i++) {
            int rc = stream_next(r, &r->streams[i], why, why_size);
            if (rc < 0)
                return rc;
        }
    } else if (r->current) {
        /* the event returned last is consumed: its stream moves on */
        int rc = stream_next(r, r->current, why, why_size);
        if (rc < 0)
            return rc;
    }
    struct stream *best = NULL;
    for (size_t i = 0; i < r->n_streams; i++) {
        struct stream *s = &r->streams[i];
        if (!s->done && (!best || s->ev.ts < best->ev.ts))
            best = s;
    }
    r->current = best;
    if (!best)
        return 0;
    if (!r->clock && best->sc->clock)
        r->clock = &best->sc->clock->pub;
    *ev = &best->ev;
    return 1;
}

static int disc_order(const void *a, const void *b)
{
    const struct ctfread_discarded *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

size_t ctfread_discarded(const struct ctfread_reader *r, const struct ctfread_discarded **list)
{
    qsort(r->disc, r->n_disc, sizeof *r->disc, disc_order);
    *list = r->disc;
    return r->n_disc;
}

const struct ctfread_clock *ctfread_event_clock(const struct ctfread_reader *r) { return r->clock; }

const char *ctfread_class_name(const struct ctfread_class *cls) { return cls->name; }

const struct ctfread_type *ctfread_class_payload(const struct ctfread_class *cls) { return cls->payload; }

const struct ctfread_type *ctfread_class_common(const struct ctfread_class *cls) { return cls->sc->event_context; }

int ctfread_member(const struct ctfread_type *type, const char *name) { return member_index(type, name); }

char ctfread_member_kind(const struct ctfread_type *type, int i)
{
    const struct member *m = &type->members[i];
    if (m->type->kind == T_INT || m->type->kind == T_ENUM)
        return 'i';
    return m->type->kind == T_STRING || m->is_char_array ? 's' : 0;
}

static void free_trace(struct trace *tr)
{
    for (struct ctfread_type *t = tr->types, *next; t; t = next) {
        next = t->next_alloc;
        for (size_t i = 0; i < t->n_entries; i++)
            free(t->entries[i].label);
        free(t->entries);
        for (size_t i = 0; i < t->n_members; i++) {
            free(t->members[i].name);
            free(t->members[i].option_of_entry);
        }
        free(t->members);
        free(t->tag_name);
        free(t->fixed_off);
        free(t);
    }
    for (size_t i = 0; i < tr->n_streams; i++)
        free(tr->streams[i].by_id);
    free(tr->streams);
    for (size_t i = 0; i < tr->n_classes; i++)
        free(tr->classes[i].name);
    free(tr->classes);
    for (size_t i = 0; i < tr->n_clocks; i++)
        free(tr->clocks[i].name);
    free(tr->clocks);
    free(tr->dir);
}

void ctfread_close(struct ctfread_reader *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_streams; i++) {
        munmap((void *)r->streams[i].data, r->streams[i].len);
        free(r->streams[i].path);
    }
    free(r->streams);
    for (size_t i = 0; i < r->n_traces; i++)
        free_trace(&r->traces[i]);
    free(r->traces);
    free(r->disc);
    free(r);
}
