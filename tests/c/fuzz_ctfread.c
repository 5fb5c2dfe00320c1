/* libFuzzer target: rpcscope's own CTF reader (analysis/ctfread.c) on untrusted traces. The input
 * is one trace: a 4-byte little-endian length, that many bytes of metadata (TSDL text or metadata
 * packets), and the rest as its one data stream. Both are written to a private directory, opened,
 * read to their end (or the reader's refusal) with every decoded value touched, as ctfcols does.
 *
 * Seeds (build/fuzz/ctfread_seeds, made by tests/c/make_ctfread_seeds.py): the committed real
 * LTTng-UST and perf traces of tests/python/fixtures/run-udp-small and bt2-written synthetic ones.
 *
 *   make test-fuzz            a short run (part of make test)
 *   make fuzz-long            a long campaign
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctfread.h"

static char dir[64];

static int put(const char *name, const uint8_t *data, size_t len)
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -1;
	int rc = write(fd, data, len) == (ssize_t)len ? 0 : -1;
	close(fd);
	return rc;
}

/* Members by name, as ctfcols finds the ones it keeps (a sample of its names, integers and
 * strings), each value read as its kind says. */
static void touch_scope(const struct ctfread_scope *s, volatile uint64_t *sink)
{
	static const char *const names[] = {"id", "vtid", "vpid", "tid", "pid", "procname", "call_id", "frag",
					     "len", "ret", "name", "skbaddr", "prev_state", "next_comm", "vec", "ip"};
	if (!s->type)
		return;
	for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
		int i = ctfread_member(s->type, names[k]);
		if (i < 0)
			continue;
		char kind = ctfread_member_kind(s->type, i);
		if (kind == 'i')
			*sink += (uint64_t)s->ival[i];
		else if (kind == 's' && s->sval[i])
			*sink += strlen(s->sval[i]);
	}
}

/* The directory goes when the fuzzer exits (a crash leaves it beside the crash file). */
static void remove_dir(void)
{
	char path[128];
	snprintf(path, sizeof path, "%s/metadata", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/stream", dir);
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static volatile uint64_t sink;
	if (!dir[0]) {
		snprintf(dir, sizeof dir, "/tmp/rpcscope-fuzz-ctfread-%d", (int)getpid());
		if (mkdir(dir, 0700) && access(dir, W_OK))
			abort();
		atexit(remove_dir);
	}
	if (size < 4)
		return 0;
	uint32_t mlen;
	memcpy(&mlen, data, 4);
	if (mlen > size - 4)
		mlen = (uint32_t)(size - 4);
	if (put("metadata", data + 4, mlen) || put("stream", data + 4 + mlen, size - 4 - mlen))
		return 0;
	char *dirs[] = {dir};
	char why[512];
	struct ctfread_reader *r = NULL;
	if (ctfread_open(dirs, 1, &r, why, sizeof why) == CTFREAD_OK) {
		const struct ctfread_event *ev;
		for (int n = 0; n < 100000 && ctfread_next(r, &ev, why, sizeof why) == 1; n++) {
			sink += ev->ts + (uint64_t)ev->cpu + strlen(ctfread_class_name(ev->cls));
			touch_scope(&ev->payload, &sink);
			touch_scope(&ev->common, &sink);
		}
		const struct ctfread_discarded *d;
		size_t nd = ctfread_discarded(r, &d);
		for (size_t i = 0; i < nd; i++)
			sink += d[i].count;
		const struct ctfread_clock *c = ctfread_event_clock(r);
		if (c)
			sink += c->freq + strlen(c->name);
	}
	ctfread_close(r);
	return 0;
}
