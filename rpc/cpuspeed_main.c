/* rpc-cpuspeed: the CPU speed check (cpuspeed.h) from the command line. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpuspeed.h"
#include "util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rpc-cpuspeed [options]\n"
            "How long each CPU takes for one fixed piece of work (a chain of 64-bit multiply-adds),\n"
            "slice after slice, one pinned thread a CPU, all CPUs at once. On a VM a slice takes longer\n"
            "while the hypervisor gives the CPU less of a physical core, which the guest cannot see\n"
            "otherwise; max/min is how far the CPU's speed moved during the check, lost_%% the share\n"
            "of its time beyond the pace of its fastest slice.\n\n"
            "  --cpu LIST           the CPUs, e.g. 0 or 0,1 (default 0)\n"
            "  --slices N           slices a CPU (default 100)\n"
            "  --slice-iterations N multiply-adds a slice (default 500000, ~1 ms at 2 GHz)\n"
            "  --max-seconds S      stop every CPU's slices after S seconds (default 5)\n"
            "  --json               one JSON object, every slice's time included, instead of the table\n"
            "  -h, --help           this help\n\n"
            "examples:\n"
            "  rpc-cpuspeed --cpu 0,1\n"
            "  rpc-cpuspeed --cpu 1 --slices 1000 --json\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "cpu", required_argument, NULL, 'c' },
        { "slices", required_argument, NULL, 's' },
        { "slice-iterations", required_argument, NULL, 'i' },
        { "max-seconds", required_argument, NULL, 'm' },
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct cpuspeed_config cfg;
    struct cpuspeed_result *res = NULL;
    int opt, longindex = -1, json = 0, rc = 0, status = 0;
    uint64_t v;

    cpuspeed_config_defaults(&cfg);
    while ((opt = getopt_long(argc, argv, "h", opts, &longindex)) != -1) {
        switch (opt) {
        case 'c':
            rc = util_parse_cpu_list(optarg, cfg.cpus, CPUSPEED_MAX_CPUS);
            if (rc > 0) {
                cfg.ncpus = rc;
                rc = 0;
            }
            break;
        case 's':
            rc = util_parse_u64(optarg, 1, CPUSPEED_MAX_SLICES, &v);
            cfg.slices = (uint32_t)v;
            break;
        case 'i': rc = util_parse_u64(optarg, 1000, 1000000000ULL, &cfg.slice_iterations); break;
        case 'm': rc = util_parse_double(optarg, 0.001, 3600, &cfg.max_seconds); break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (rc) {
            fprintf(stderr, "rpc-cpuspeed: --%s: %s\n", longindex >= 0 ? opts[longindex].name : "?", util_error());
            return 2;
        }
        longindex = -1;
    }
    if (optind < argc) {
        fprintf(stderr, "rpc-cpuspeed: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (cpuspeed_check(&cfg)) {
        fprintf(stderr, "rpc-cpuspeed: %s\n", util_error());
        return 2;
    }
    res = calloc(1, sizeof *res);
    if (!res) {
        fprintf(stderr, "rpc-cpuspeed: out of memory\n");
        return 1;
    }
    if (cpuspeed_run(&cfg, res)) {
        fprintf(stderr, "rpc-cpuspeed: %s\n", util_error());
        status = 1;
        goto out;
    }
    cpuspeed_print(&cfg, res, stdout, json);
    cpuspeed_free(res);
out:
    free(res);
    return status;
}
