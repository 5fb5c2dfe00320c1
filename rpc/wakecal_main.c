/* rpc-wakecal: the wake-up calibration (wakecal.h) from the command line. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "wakecal.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rpc-wakecal [options]\n"
            "What a wake-up costs a reader blocked in epoll_wait, by where the datagram that wakes it\n"
            "lands against its going to sleep, against a reader that never sleeps (the 'busy' row).\n"
            "Per point: the time from the send to the reader's return, its sleeps and the interrupts\n"
            "its CPU got (RES + CAL) per iteration. Then the wake-up right after an interrupt-borne\n"
            "one: iterations alternate between the offset that raced the sleeper most often and the\n"
            "latest calm one, and the calm ones are split by whether the race before them took its\n"
            "interrupt ('after an interrupt'; JSON after_interrupt, null where no offset raced).\n"
            "Loopback only; bounded by --max-seconds.\n\n"
            "  --sender-cpu N       the sender's CPU (default 0)\n"
            "  --receiver-cpu N     the reader's CPU (default 1; not the sender's)\n"
            "  --iterations N       iterations per point (default 1000)\n"
            "  --offsets A:B:STEP   send offsets from the reader's heading for its wait, ns: negative,\n"
            "                       the reader spins that long first (default -4000:1000:125)\n"
            "  --max-seconds S      give up after S seconds (default 30)\n"
            "  --json               one JSON object instead of the table\n"
            "  -h, --help           this help\n\n"
            "examples:\n"
            "  rpc-wakecal --sender-cpu 0 --receiver-cpu 1\n"
            "  rpc-wakecal --offsets -3000:-1000:100 --iterations 5000 --json\n");
}

/* "A:B:STEP", each a whole integer in [-1e6, 1e6]. */
static int parse_offsets(const char *s, struct wakecal_config *cfg)
{
    long v[3];
    const char *p = s;
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        v[i] = strtol(p, &end, 10);
        if (end == p || errno || v[i] < -1000000 || v[i] > 1000000 || (i < 2 ? *end != ':' : *end != '\0'))
            return util_fail(UTIL_EINVAL, "'%s' is not FIRST:LAST:STEP in ns (e.g. -4000:1000:125)", s);
        p = end + 1;
    }
    cfg->offset_first_ns = (int)v[0];
    cfg->offset_last_ns = (int)v[1];
    cfg->offset_step_ns = (int)v[2];
    return UTIL_OK;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "sender-cpu", required_argument, NULL, 's' },
        { "receiver-cpu", required_argument, NULL, 'r' },
        { "iterations", required_argument, NULL, 'n' },
        { "offsets", required_argument, NULL, 'o' },
        { "max-seconds", required_argument, NULL, 'm' },
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct wakecal_config cfg;
    struct wakecal_result *res = NULL;
    int opt, longindex = -1, json = 0, rc = 0, status = 0;
    uint64_t v;

    wakecal_config_defaults(&cfg);
    while ((opt = getopt_long(argc, argv, "h", opts, &longindex)) != -1) {
        switch (opt) {
        case 's':
            rc = util_parse_u64(optarg, 0, 1023, &v);
            cfg.sender_cpu = (int)v;
            break;
        case 'r':
            rc = util_parse_u64(optarg, 0, 1023, &v);
            cfg.receiver_cpu = (int)v;
            break;
        case 'n':
            rc = util_parse_u64(optarg, 10, 1000000, &v);
            cfg.iterations = (uint32_t)v;
            break;
        case 'o': rc = parse_offsets(optarg, &cfg); break;
        case 'm': rc = util_parse_double(optarg, 0.001, 3600, &cfg.max_seconds); break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (rc) {
            fprintf(stderr, "rpc-wakecal: --%s: %s\n", longindex >= 0 ? opts[longindex].name : "?", util_error());
            return 2;
        }
        longindex = -1;
    }
    if (optind < argc) {
        fprintf(stderr, "rpc-wakecal: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (wakecal_check(&cfg)) {
        fprintf(stderr, "rpc-wakecal: %s\n", util_error());
        return 2;
    }
    res = malloc(sizeof *res);
    if (!res) {
        fprintf(stderr, "rpc-wakecal: out of memory\n");
        return 1;
    }
    if (wakecal_run(&cfg, res)) {
        fprintf(stderr, "rpc-wakecal: %s\n", util_error());
        status = 1;
        goto out;
    }
    wakecal_print(&cfg, res, stdout, json);
out:
    free(res);
    return status;
}
