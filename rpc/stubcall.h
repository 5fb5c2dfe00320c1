/* The stub-design study's procedures (the interfaces in stubs/idl, Chung et al.), served
 * and called through the reference RPC with any stub variant, so that their
 * marshalling shows up in the traced steps C3-C5 (client) and S5 (server).
 *
 * Procedure ids start at STUBCALL_PROC_BASE, in the order of the generated
 * stubreg_procs[]; names are "interface.procedure", e.g. "chung.structure".
 * A variant is a compiled one (inline-byte, inline-item, proc-byte,
 * proc-item, block) or the interpreter in the same modes (interp-inline-byte,
 * ...), as stubs/ names them. Every variant writes the same bytes, so client and server may differ.
 * The server's procedure returns a checksum of the value it unmarshalled,
 * re-encoded canonically, and its wire length: the client checks both. */
#ifndef RPCS_STUBCALL_H
#define RPCS_STUBCALL_H

#include <stddef.h>
#include <stdint.h>

#define STUBCALL_PROC_BASE 16
#define STUBCALL_INTERP 0x100 /* variant flag: the interpreted stub */

int stubcall_count(void);
int stubcall_is(int proc);
int stubcall_by_name(const char *name);
const char *stubcall_name(int proc);
size_t stubcall_args_size(int proc);
size_t stubcall_wire_max(int proc);
/* The largest value and wire sizes of all the study's procedures. */
size_t stubcall_max_args_size(void);
size_t stubcall_max_wire(void);

int stubcall_parse_variant(const char *s, int *variant);
/* Block copy moves memory as it is: it cannot swap bytes. */
int stubcall_is_block(int variant);
const char *stubcall_variant_name(int variant);

/* Marshal or unmarshal a value in the byte order named by the PDU's drep. */
int stubcall_marshal(int proc, int variant, const void *value, uint8_t *buf, size_t cap, size_t *len,
                     uint8_t drep);
int stubcall_unmarshal(int proc, int variant, void *value, const uint8_t *buf, size_t len, uint8_t drep);
/* A zeroed value filled with random contents (full-length strings, the paper's workload). */
void stubcall_fill(int proc, void *value, uint64_t seed);
/* FNV-1a of the value's canonical encoding (compiled item copy, network order). */
int stubcall_checksum(int proc, const void *value, uint8_t *scratch, size_t cap, uint32_t *sum);

#endif
