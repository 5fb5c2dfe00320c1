/* Turns: a client that measures only in the turns a coordinator gives it, so that several clients
 * (of several sizes and builds) see the same moments of a noisy host (collectors/interleave.py
 * take_cooperative_turns). The coordinator writes one byte into the client's turn pipe to start a
 * turn; the client calls until the turn is over (a number of calls, or a time), always between two
 * calls (no call is cut in two), then writes one byte back and waits for its next turn. It ends by
 * exiting: the coordinator sees the end of its pipe.
 *
 *     struct turns t;
 *     turns_init(&t, in_fd, out_fd, turn_calls, turn_ns);  // in_fd < 0: no turns, the calls below do nothing
 *     turns_wait(&t);                            // the first turn
 *     ... a call ...; turns_after_call(&t);      // yields once the turn's time is up
 */
#ifndef RPCS_TURNS_H
#define RPCS_TURNS_H
#include <stdint.h>

/* rpc-client --turn-us bounds: a turn holds at least one call, and a coordinator that gives turns
 * of more than a second has no use for them. */
#define TURNS_MIN_US 100
#define TURNS_MAX_US 1000000
#define TURNS_MAX_CALLS 1000000

struct turns {
    int in_fd, out_fd;   /* the coordinator's "go" (read) and the client's "done" (write); -1: none */
    uint64_t turn_calls; /* a turn is this many calls; 0: turn_ns long */
    uint64_t turn_ns;
    uint64_t started_ns; /* when the current turn began */
    uint64_t calls_in_turn;
    uint64_t count; /* turns begun */
};

void turns_init(struct turns *t, int in_fd, int out_fd, uint64_t turn_calls, uint64_t turn_ns);
/* Whether turns are on. */
int turns_on(const struct turns *t);
/* Block until the coordinator gives a turn; UTIL_ESYS if it has gone (its pipe ended) or a read failed. */
int turns_wait(struct turns *t);
/* After a call: once the turn's calls are made (or its time is up), hand the turn back and wait for the next (turns_wait).
 * *yielded is set to 1 when it did (a sleep that is no part of a call), else 0. */
int turns_after_call(struct turns *t, uint64_t now_ns, int *yielded);
/* Parse "IN,OUT" (two open file descriptors) for --turn-fds. */
int turns_parse_fds(const char *s, int *in_fd, int *out_fd);
#endif
