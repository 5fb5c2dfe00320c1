/* The server's at-most-once memory: per client activity, the last call seen
 * and, once it has run, its reply. A duplicate request is answered from here
 * instead of running again. Set-associative (4 ways per set, least recently
 * used way evicted) so lookups are O(1) and memory is bounded in entries and
 * reply bytes. Shared by the listener and the executors (one mutex).
 *
 * Each entry also remembers the source (address and port) its activity's
 * current call came from, and whether that source has acknowledged a reply
 * of the activity (the server's cookie came back from it: it receives what
 * is sent there). Replies go to that source only. When replies outgrow the
 * byte bound, the least recently used entries lose their reply (not their
 * at-most-once state) to make room for the newest. */
#ifndef RPCS_REPLYCACHE_H
#define RPCS_REPLYCACHE_H

#include <netinet/in.h>
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
    int reply_lost;    /* it ran, but its reply was over the byte bound */
    uint32_t src_addr; /* where the call came from (network order) */
    uint16_t src_port;
    uint8_t validated; /* that source acknowledged a reply of this activity */
    uint64_t used;
};

/* What replycache_get found. */
struct replycache_view {
    int state;       /* enum replycache_state */
    int same_source; /* the asking source is the one the call came from */
    int validated;   /* and it has acknowledged a reply of this activity */
    uint16_t proc;
    uint8_t drep, flags;
    uint32_t reply_len; /* DONE: the whole reply */
};

struct replycache {
    pthread_mutex_t lock;
    struct replycache_entry *entries;
    uint32_t nsets;
    size_t bytes, max_bytes;
    uint64_t clock, evictions, oversize, reply_evictions;
};

int replycache_init(struct replycache *rc, uint32_t entries, size_t max_bytes);
void replycache_free(struct replycache *rc);
/* What the cache knows of (activity, seq). For DONE, the reply is copied to
 * buf (cap bytes) with its length, proc, drep and flags. */
int replycache_lookup(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint8_t *buf, size_t cap,
                      uint32_t *len, uint16_t *proc, uint8_t *drep, uint8_t *flags);
/* What the cache knows of (activity, seq) as seen from source `from` (NULL:
 * the anonymous source). For DONE from the call's own source, reply bytes
 * [off, off + cap) are copied to buf (the view says the whole length). */
int replycache_get(struct replycache *rc, const uint8_t activity[16], uint32_t seq, const struct sockaddr_in *from,
                   uint32_t off, uint8_t *buf, size_t cap, struct replycache_view *v);
/* Mark (activity, seq) running; it replaces the activity's earlier call. */
void replycache_begin(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint16_t proc, uint8_t drep);
/* The same for a call from `from`; the activity stays validated if its source is unchanged. */
void replycache_begin_from(struct replycache *rc, const uint8_t activity[16], uint32_t seq, uint16_t proc, uint8_t drep,
                           const struct sockaddr_in *from);
/* Record the reply body of a call that ran; returns 1 if the reply is kept. */
int replycache_finish(struct replycache *rc, const uint8_t activity[16], uint32_t seq, const uint8_t *reply,
                      uint32_t len, uint8_t flags);
/* Whether `from` has acknowledged a reply of this activity. */
int replycache_validated(struct replycache *rc, const uint8_t activity[16], const struct sockaddr_in *from);
/* Record that `from` acknowledged a reply of (activity, seq); 0 if that call is not known from there. */
int replycache_validate(struct replycache *rc, const uint8_t activity[16], uint32_t seq,
                        const struct sockaddr_in *from);

#endif
