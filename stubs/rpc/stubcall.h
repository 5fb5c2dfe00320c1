/* The stub-design study's procedures (the interfaces in stubs/idl, Chung et al.) plugged
 * into the reference RPC (rpc/procs.h procs_register), so that their marshalling shows up
 * in the traced steps C3-C5 (client) and S5 (server) with any stub variant.
 *
 * Procedure ids start at PROCS_PLUGIN_BASE, in the order of the generated
 * stubreg_procs[]; names are "interface.procedure", e.g. "chung.structure".
 * A variant is a compiled one (inline-byte, inline-item, proc-byte, proc-item,
 * block) or the interpreter in the same modes (interp-inline-byte, ...), as
 * stubs/ names them. Every variant writes the same bytes, so client and server
 * may differ. The server's procedure returns a checksum of the value it
 * unmarshalled, re-encoded canonically, and its wire length: the client checks both.
 *
 * A program serves or calls them after procs_register(&stubcall_procs).
 */
#ifndef RPCS_STUBCALL_H
#define RPCS_STUBCALL_H

#include "procs.h"

#define STUBCALL_INTERP 0x100 /* variant flag: the interpreted stub */

extern const struct procs_table stubcall_procs;

#endif
