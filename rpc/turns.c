/* Turns given by a coordinator through a pipe pair; see turns.h. */
#include "turns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "util.h"

void turns_init(struct turns *t, int in_fd, int out_fd, uint64_t turn_calls, uint64_t turn_ns)
{
    t->in_fd = in_fd;
    t->out_fd = out_fd;
    t->turn_calls = turn_calls;
    t->turn_ns = turn_ns;
    t->calls_in_turn = 0;
    t->started_ns = 0;
    t->count = 0;
}

int turns_on(const struct turns *t) { return t->in_fd >= 0; }

int turns_wait(struct turns *t)
{
    char go;
    ssize_t n;

    if (!turns_on(t))
        return UTIL_OK;
    do
        n = read(t->in_fd, &go, 1);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return util_fail_errno("read(turn pipe %d)", t->in_fd);
    if (n == 0)
        return util_fail(UTIL_ESYS,
                         "read(turn pipe %d): the turn coordinator closed it before the calls were "
                         "done",
                         t->in_fd);
    t->count++;
    t->calls_in_turn = 0;
    t->started_ns = util_now_ns();
    return UTIL_OK;
}

int turns_after_call(struct turns *t, uint64_t now_ns, int *yielded)
{
    const char done = 't';
    ssize_t n;

    *yielded = 0;
    if (!turns_on(t))
        return UTIL_OK;
    t->calls_in_turn++;
    if (t->turn_calls ? t->calls_in_turn < t->turn_calls : now_ns - t->started_ns < t->turn_ns)
        return UTIL_OK;
    do
        n = write(t->out_fd, &done, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        return util_fail_errno("write(turn pipe %d)", t->out_fd);
    *yielded = 1;
    return turns_wait(t);
}

int turns_parse_fds(const char *s, int *in_fd, int *out_fd)
{
    int a, b, end = 0;

    if (sscanf(s, "%d,%d%n", &a, &b, &end) != 2 || s[end] || a < 0 || b < 0 || a == b)
        return util_fail(UTIL_EINVAL, "'%s' is not IN,OUT: two file descriptors", s);
    if (fcntl(a, F_GETFD) < 0 || fcntl(b, F_GETFD) < 0)
        return util_fail(UTIL_EINVAL, "'%s': file descriptor %d is not open (a coordinator passes both)", s,
                         fcntl(a, F_GETFD) < 0 ? a : b);
    *in_fd = a;
    *out_fd = b;
    return UTIL_OK;
}
