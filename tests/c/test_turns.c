/* rpc/turns.c: a client's turns through a pipe pair, as collectors/interleave.py gives them. The
 * coordinator's side is played here by writing "go" bytes ahead and reading the "done" bytes back. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "turns.h"
#include "util.h"

int main(void)
{
    int go[2], done[2], in_fd = -1, out_fd = -1, yielded = -1;
    struct turns t;
    char buf[8], spec[32];

    CHECK_EQ(pipe(go), 0);
    CHECK_EQ(pipe(done), 0);

    /* No turns: every call is a no-op and never yields. */
    turns_init(&t, -1, -1, 3, 0);
    CHECK(!turns_on(&t));
    CHECK_EQ(turns_wait(&t), UTIL_OK);
    CHECK_EQ(turns_after_call(&t, 0, &yielded), UTIL_OK);
    CHECK_EQ(yielded, 0);

    /* Turns of 3 calls: the first turn, two calls, then the third hands the turn back and waits for
     * the next, which the coordinator already gave. */
    turns_init(&t, go[0], done[1], 3, 0);
    CHECK_EQ(write(go[1], "gg", 2), 2);
    CHECK_EQ(turns_wait(&t), UTIL_OK);
    CHECK_EQ(t.count, 1);
    CHECK_EQ(turns_after_call(&t, 0, &yielded), UTIL_OK);
    CHECK_EQ(yielded, 0);
    CHECK_EQ(turns_after_call(&t, 0, &yielded), UTIL_OK);
    CHECK_EQ(yielded, 0);
    CHECK_EQ(turns_after_call(&t, 0, &yielded), UTIL_OK);
    CHECK_EQ(yielded, 1);
    CHECK_EQ(t.count, 2);
    CHECK_EQ(t.calls_in_turn, 0);
    CHECK_EQ(read(done[0], buf, sizeof buf), 1);         /* one byte: the turn handed back */

    /* Turns of a time: not over before it, over at it. */
    turns_init(&t, go[0], done[1], 0, 1000);
    CHECK_EQ(write(go[1], "gg", 2), 2);
    CHECK_EQ(turns_wait(&t), UTIL_OK);
    CHECK_EQ(turns_after_call(&t, t.started_ns + 999, &yielded), UTIL_OK);
    CHECK_EQ(yielded, 0);
    CHECK_EQ(turns_after_call(&t, t.started_ns + 1000, &yielded), UTIL_OK);
    CHECK_EQ(yielded, 1);
    CHECK_EQ(read(done[0], buf, sizeof buf), 1);

    /* The coordinator gone: the wait for the next turn fails, saying so. */
    turns_init(&t, go[0], done[1], 1, 0);
    close(go[1]);
    CHECK_EQ(turns_wait(&t), UTIL_ESYS);
    CHECK(strstr(util_error(), "turn coordinator closed it") != NULL);

    /* --turn-fds: two open descriptors, IN,OUT. */
    snprintf(spec, sizeof spec, "%d,%d", go[0], done[1]);
    CHECK_EQ(turns_parse_fds(spec, &in_fd, &out_fd), UTIL_OK);
    CHECK_EQ(in_fd, go[0]);
    CHECK_EQ(out_fd, done[1]);
    CHECK_EQ(turns_parse_fds("3", &in_fd, &out_fd), UTIL_EINVAL);
    CHECK_EQ(turns_parse_fds("4,4", &in_fd, &out_fd), UTIL_EINVAL);
    CHECK_EQ(turns_parse_fds("4,5x", &in_fd, &out_fd), UTIL_EINVAL);
    CHECK_EQ(turns_parse_fds("900,901", &in_fd, &out_fd), UTIL_EINVAL);
    CHECK(strstr(util_error(), "900 is not open") != NULL);
    CHECK_DONE("test_turns");
}
