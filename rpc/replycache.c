#include "replycache.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

int replycache_init(struct replycache *rc, uint32_t entries, size_t max_bytes)
{
    memset(rc, 0, sizeof *rc);
    rc->nsets = (entries + REPLYCACHE_WAYS - 1) / REPLYCACHE_WAYS;
    if (!rc->nsets)
        rc->nsets = 1;
    rc->entries = calloc((size_t)rc->nsets * REPLYCACHE_WAYS, sizeof *rc->entries);
    if (!rc->entries)
        return util_fail(UTIL_ENOMEM, "calloc(reply cache of %u entries)", entries);
    rc->max_bytes = max_bytes;
    pthread_mutex_init(&rc->lock, NULL);
    return UTIL_OK;
}

void replycache_free(struct replycache *rc)
{
    if (!rc->entries)
        return;
    for (size_t i = 0; i < (size_t)rc->nsets * REPLYCACHE_WAYS; i++)
        free(rc->entries[i].reply);
    free(rc->entries);
    rc->entries = NULL;
    pthread_mutex_destroy(&rc->lock);
}

static struct replycache_entry *set_of(struct replycache *rc, const uint8_t activity[16])
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the activity id */
    for (int i = 0; i < 16; i++)
        h = (h ^ activity[i]) * 1099511628211ull;
    return &rc->entries[(h % rc->nsets) * REPLYCACHE_WAYS];
}

static struct replycache_entry *find(struct replycache *rc, const uint8_t activity[16])
{
    struct replycache_entry *set = set_of(rc, activity);
    for (int w = 0; w < REPLYCACHE_WAYS; w++)
        if (set[w].state != REPLYCACHE_NONE && !memcmp(set[w].activity, activity, 16))
            return &set[w];
    return NULL;
}

static void clear_reply(struct replycache *rc, struct replycache_entry *e)
{
    rc->bytes -= e->reply_len;
    free(e->reply);
    e->reply = NULL;
    e->reply_len = 0;
    e->reply_lost = 0;
}

static void src_of(const struct sockaddr_in *from, uint32_t *addr, uint16_t *port)
{
    *addr = from ? from->sin_addr.s_addr : 0;
    *port = from ? from->sin_port : 0;
}

static int same_src(const struct replycache_entry *e, const struct sockaddr_in *from)
{
    uint32_t addr;
    uint16_t port;
    src_of(from, &addr, &port);
    return e->src_addr == addr && e->src_port == port;
}

int replycache_get(struct replycache *rc, const uint8_t activity[16], uint32_t seq, const struct sockaddr_in *from,
                   uint32_t off, uint8_t *buf, size_t cap, struct replycache_view *v)
{
    memset(v, 0, sizeof *v);
    pthread_mutex_lock(&rc->lock);
    struct replycache_entry *e = find(rc, activity);
    if (e) {
        e->used = ++rc->clock;
        v->same_source = same_src(e, from);
        v->validated = v->same_source && e->validated;
        if (e->seq == seq) {
            v->state = e->state;
            v->proc = e->proc;
            v->drep = e->drep;
            v->flags = e->flags;
            if (v->state == REPLYCACHE_DONE) {
                if (e->reply_lost) {
                    v->state = REPLYCACHE_RUNNING; /* reply too big to keep: the client will give up */
                } else {
                    v->reply_len = e->reply_len;
                    if (v->same_source && off < e->reply_len && cap)
                        memcpy(buf, e->reply + off, e->reply_len - off < cap ? e->reply_len - off : cap);
                }
            }
        } else if ((int32_t)(seq - e->seq) < 0) {
            v->state = REPLYCACHE_OLD;
        }
    }
    pthread_mutex_unlock(&rc->lock);
    return v->state;
}

int replycache_lookup(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint8_t *buf, size_t cap,
                      uint32_t *len, uint16_t *proc, uint8_t *drep, uint8_t *flags)
{
    struct replycache_view v;
    int state = replycache_get(rc, activity, seq, NULL, 0, buf, cap, &v);
    if (state == REPLYCACHE_DONE) {
        if (v.reply_len > cap)
            return REPLYCACHE_RUNNING;
        *len = v.reply_len;
        *proc = v.proc;
        *drep = v.drep;
        *flags = v.flags;
    }
    return state;
}

void replycache_begin_from(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint16_t proc, uint8_t drep,
                           const struct sockaddr_in *from)
{
    pthread_mutex_lock(&rc->lock);
    struct replycache_entry *e = find(rc, activity);
    if (!e) {
        struct replycache_entry *set = set_of(rc, activity);
        e = &set[0];
        for (int w = 0; w < REPLYCACHE_WAYS; w++) {
            if (set[w].state == REPLYCACHE_NONE) {
                e = &set[w];
                break;
            }
            if (set[w].used < e->used)
                e = &set[w];
        }
        if (e->state != REPLYCACHE_NONE)
            rc->evictions++;
        clear_reply(rc, e);
        memcpy(e->activity, activity, 16);
        e->validated = 0;
    } else if (!same_src(e, from)) {
        e->validated = 0;
    }
    clear_reply(rc, e);
    src_of(from, &e->src_addr, &e->src_port);
    e->state = REPLYCACHE_RUNNING;
    e->seq = seq;
    e->proc = proc;
    e->drep = drep;
    e->flags = 0;
    e->used = ++rc->clock;
    pthread_mutex_unlock(&rc->lock);
}

void replycache_begin(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint16_t proc, uint8_t drep)
{
    replycache_begin_from(rc, activity, seq, proc, drep, NULL);
}

/* Make room for len more reply bytes by dropping the replies of the least
 * recently used entries (they keep their at-most-once state). */
static void make_room(struct replycache *rc, const struct replycache_entry *keep, uint32_t len)
{
    size_t n = (size_t)rc->nsets * REPLYCACHE_WAYS;
    while (rc->bytes + len > rc->max_bytes) {
        struct replycache_entry *victim = NULL;
        for (size_t i = 0; i < n; i++) {
            struct replycache_entry *e = &rc->entries[i];
            if (e != keep && e->reply_len && (!victim || e->used < victim->used))
                victim = e;
        }
        if (!victim)
            return;
        clear_reply(rc, victim);
        victim->reply_lost = 1;
        rc->reply_evictions++;
    }
}

int replycache_finish(struct replycache *rc, const uint8_t activity[16], uint32_t seq, const uint8_t *reply,
                      uint32_t len, uint8_t flags)
{
    int kept = 0;
    pthread_mutex_lock(&rc->lock);
    struct replycache_entry *e = find(rc, activity);
    if (e && e->seq == seq) {
        clear_reply(rc, e);
        e->state = REPLYCACHE_DONE;
        e->flags = flags;
        if (len && len <= rc->max_bytes)
            make_room(rc, e, len);
        if (len && rc->bytes + len <= rc->max_bytes && (e->reply = malloc(len))) {
            memcpy(e->reply, reply, len);
            e->reply_len = len;
            rc->bytes += len;
            kept = 1;
        } else if (len) {
            /* Over the byte bound: remember that it ran (so it never runs twice), not the reply. */
            rc->oversize++;
            e->reply_lost = 1;
        } else {
            kept = 1;
        }
    }
    pthread_mutex_unlock(&rc->lock);
    return kept;
}

int replycache_validated(struct replycache *rc, const uint8_t activity[16], const struct sockaddr_in *from)
{
    int ok;
    pthread_mutex_lock(&rc->lock);
    struct replycache_entry *e = find(rc, activity);
    ok = e && e->validated && same_src(e, from);
    pthread_mutex_unlock(&rc->lock);
    return ok;
}

int replycache_validate(struct replycache *rc, const uint8_t activity[16], uint32_t seq, const struct sockaddr_in *from)
{
    int ok;
    pthread_mutex_lock(&rc->lock);
    struct replycache_entry *e = find(rc, activity);
    ok = e && e->seq == seq && e->state == REPLYCACHE_DONE && same_src(e, from);
    if (ok)
        e->validated = 1;
    pthread_mutex_unlock(&rc->lock);
    return ok;
}
