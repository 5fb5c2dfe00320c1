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

int replycache_lookup(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint8_t *buf, size_t cap,
                      uint32_t *len, uint16_t *proc, uint8_t *drep, uint8_t *flags)
{
    int state = REPLYCACHE_NONE;
    pthread_mutex_lock(&rc->lock);
    struct replycache_entry *e = find(rc, activity);
    if (e) {
        e->used = ++rc->clock;
        if (e->seq == seq) {
            state = e->state;
            if (state == REPLYCACHE_DONE) {
                if (e->reply_lost || e->reply_len > cap) {
                    state = REPLYCACHE_RUNNING; /* reply too big to keep: the client will give up */
                } else {
                    if (e->reply_len)
                        memcpy(buf, e->reply, e->reply_len);
                    *len = e->reply_len;
                    *proc = e->proc;
                    *drep = e->drep;
                    *flags = e->flags;
                }
            }
        } else if ((int32_t)(seq - e->seq) < 0) {
            state = REPLYCACHE_OLD;
        }
    }
    pthread_mutex_unlock(&rc->lock);
    return state;
}

void replycache_begin(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint16_t proc, uint8_t drep)
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
    }
    clear_reply(rc, e);
    e->state = REPLYCACHE_RUNNING;
    e->seq = seq;
    e->proc = proc;
    e->drep = drep;
    e->flags = 0;
    e->used = ++rc->clock;
    pthread_mutex_unlock(&rc->lock);
}

void replycache_finish(struct replycache *rc, const uint8_t activity[16], uint32_t seq, const uint8_t *reply,
                       uint32_t len, uint8_t flags)
{
    pthread_mutex_lock(&rc->lock);
    struct replycache_entry *e = find(rc, activity);
    if (e && e->seq == seq) {
        clear_reply(rc, e);
        e->state = REPLYCACHE_DONE;
        e->flags = flags;
        if (len && rc->bytes + len <= rc->max_bytes && (e->reply = malloc(len))) {
            memcpy(e->reply, reply, len);
            e->reply_len = len;
            rc->bytes += len;
        } else if (len) {
            /* Over the byte bound: remember that it ran (so it never runs twice), not the reply. */
            rc->oversize++;
            e->reply_lost = 1;
        }
    }
    pthread_mutex_unlock(&rc->lock);
}
