/* The server's at-most-once memory: per client activity, the last call seen
 * and, once it has run, its reply. A duplicate request is answered from here
 * instead of running again. Set-associative (4 ways per set, least recently
 * used way evicted) so lookups are O(1) and memory is bounded in entries and
 * reply bytes. Shared by the listener and the executors (one mutex). */
#ifndef RPCS_REPLYCACHE_H
#define RPCS_REPLYCACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define REPLYCACHE_WAYS 4

enum replycache_state { REPLYCACHE_NONE = 0, REPLYCACHE_RUNNING, REPLYCACHE_DONE, REPLYCACHE_OLD };

struct replycache_entry {
    int state;
    uint8_t activity[16];
    uint32_t seq;
    uint16_t proc;
    uint8_t drep, flags;
    uint8_t *reply;
    uint32_t reply_len;
    int reply_lost; /* it ran, but its reply was over the byte bound */
    uint64_t used;
};

struct replycache {
    pthread_mutex_t lock;
    struct replycache_entry *entries;
    uint32_t nsets;
    size_t bytes, max_bytes;
    uint64_t clock, evictions, oversize;
};

int replycache_init(struct replycache *rc, uint32_t entries, size_t max_bytes);
void replycache_free(struct replycache *rc);
/* What the cache knows of (activity, seq). For DONE, the reply is copied to
 * buf (cap bytes) with its length, proc, drep and flags. */
int replycache_lookup(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint8_t *buf, size_t cap,
                      uint32_t *len, uint16_t *proc, uint8_t *drep, uint8_t *flags);
/* Mark (activity, seq) running; it replaces the activity's earlier call. */
void replycache_begin(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint16_t proc, uint8_t drep);
/* Record the reply body of a call that ran. */
void replycache_finish(struct replycache *rc, const uint8_t activity[16], uint32_t seq, const uint8_t *reply,
                       uint32_t len, uint8_t flags);

#endif
