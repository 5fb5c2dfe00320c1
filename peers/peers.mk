# The peers (peers/): other RPC systems beside the reference one, for `rpcscope experiment`.
#
#   make peers     build/peers/bin/: tirpc-server, tirpc-serve, tirpc-client (libtirpc, rpcgen -M),
#                  grpc-server, grpc-client (gRPC C++, protoc); sockperf is Debian's
#
# Not part of `make all` (gRPC's C++ takes a minute to compile); `make test` builds it.

PEERS_OUT := build/peers
PEERS_GEN := $(PEERS_OUT)/gen
PEERS_BIN := $(PEERS_OUT)/bin
PEERS_OBJ := $(PEERS_OUT)/obj
PEERS_WARN := -Wall -Wextra -Werror
PEERS_CFLAGS := -O2 -g -std=gnu11 -D_GNU_SOURCE -pthread -Ipeers/common
PEERS_CXXFLAGS := -O2 -g -std=c++17 -D_GNU_SOURCE -pthread -Ipeers/common
CXX ?= g++
TIRPC_CFLAGS = $(shell pkg-config --cflags libtirpc)
TIRPC_LIBS = $(shell pkg-config --libs libtirpc)
GRPC_CFLAGS = $(shell pkg-config --cflags grpc++ protobuf)
GRPC_LIBS = $(shell pkg-config --libs grpc++ protobuf)
GRPC_PLUGIN = $(shell command -v grpc_cpp_plugin)

PEERS_BINS := $(PEERS_BIN)/tirpc-server $(PEERS_BIN)/tirpc-client $(PEERS_BIN)/tirpc-serve \
    $(PEERS_BIN)/grpc-server $(PEERS_BIN)/grpc-client
TIRPC_GEN := $(PEERS_GEN)/peer.h $(PEERS_GEN)/peer_clnt.c $(PEERS_GEN)/peer_svc.c $(PEERS_GEN)/peer_xdr.c
GRPC_GEN := $(PEERS_GEN)/peer.pb.h $(PEERS_GEN)/peer.pb.cc $(PEERS_GEN)/peer.grpc.pb.h $(PEERS_GEN)/peer.grpc.pb.cc

PEERS_OBJS := $(addprefix $(PEERS_OBJ)/,peerbench.o tirpc_server.o tirpc_client.o gen_peer_svc.o gen_peer_clnt.o \
    gen_peer_xdr.o grpc_server.o grpc_client.o gen_peer.pb.o gen_peer.grpc.pb.o)

.PHONY: peers
# The objects stay: `rpcscope experiment netwise` reads their code sizes.
.SECONDARY: $(PEERS_OBJS)
peers: $(PEERS_BINS)

# rpcgen -M: thread-safe stubs (the result is the caller's), skeleton without main (-m).
$(TIRPC_GEN) &: peers/tirpc/peer.x
	@mkdir -p $(PEERS_GEN)
	cp peers/tirpc/peer.x $(PEERS_GEN)/peer.x
	cd $(PEERS_GEN) && rm -f peer.h peer_clnt.c peer_svc.c peer_xdr.c && rpcgen -M -h -o peer.h peer.x && \
	    rpcgen -M -l -o peer_clnt.c peer.x && rpcgen -M -m -o peer_svc.c peer.x && rpcgen -M -c -o peer_xdr.c peer.x

$(GRPC_GEN) &: peers/grpc/peer.proto
	@mkdir -p $(PEERS_GEN)
	@test -n "$(GRPC_PLUGIN)" || { echo "grpc_cpp_plugin is missing: run make bootstrap (protobuf-compiler-grpc)"; exit 1; }
	protoc -Ipeers/grpc --cpp_out=$(PEERS_GEN) --grpc_out=$(PEERS_GEN) --plugin=protoc-gen-grpc=$(GRPC_PLUGIN) \
	    peers/grpc/peer.proto

$(PEERS_OBJ)/peerbench.o: peers/common/peerbench.c peers/common/peerbench.h
	@mkdir -p $(@D)
	$(CC) $(PEERS_WARN) $(PEERS_CFLAGS) -c -o $@ $<

$(PEERS_OBJ)/tirpc_%.o: peers/tirpc/tirpc_%.c $(TIRPC_GEN) peers/common/peerbench.h
	@mkdir -p $(@D)
	$(CC) $(PEERS_WARN) $(PEERS_CFLAGS) -I$(PEERS_GEN) $(TIRPC_CFLAGS) -c -o $@ $<

# Generated code: rpcgen's and protoc's, built without -Werror (their style is not ours).
$(PEERS_OBJ)/gen_%.o: $(PEERS_GEN)/%.c $(TIRPC_GEN)
	@mkdir -p $(@D)
	$(CC) $(PEERS_CFLAGS) -w -I$(PEERS_GEN) $(TIRPC_CFLAGS) -c -o $@ $<

$(PEERS_OBJ)/gen_%.o: $(PEERS_GEN)/%.cc $(GRPC_GEN)
	@mkdir -p $(@D)
	$(CXX) $(PEERS_CXXFLAGS) -w -I$(PEERS_GEN) $(GRPC_CFLAGS) -c -o $@ $<

$(PEERS_OBJ)/grpc_%.o: peers/grpc/grpc_%.cc $(GRPC_GEN) peers/common/peerbench.h
	@mkdir -p $(@D)
	$(CXX) $(PEERS_WARN) $(PEERS_CXXFLAGS) -isystem $(PEERS_GEN) $(GRPC_CFLAGS) -c -o $@ $<

$(PEERS_BIN)/tirpc-server: $(PEERS_OBJ)/tirpc_server.o $(PEERS_OBJ)/gen_peer_svc.o $(PEERS_OBJ)/gen_peer_xdr.o \
    $(PEERS_OBJ)/peerbench.o
	@mkdir -p $(@D)
	$(CC) -pthread -o $@ $^ $(TIRPC_LIBS)

$(PEERS_BIN)/tirpc-client: $(PEERS_OBJ)/tirpc_client.o $(PEERS_OBJ)/gen_peer_clnt.o $(PEERS_OBJ)/gen_peer_xdr.o \
    $(PEERS_OBJ)/peerbench.o
	@mkdir -p $(@D)
	$(CC) -pthread -o $@ $^ $(TIRPC_LIBS)

$(PEERS_BIN)/tirpc-serve: peers/tirpc/serve.sh
	@mkdir -p $(@D)
	install -m 0755 $< $@

$(PEERS_BIN)/grpc-%: $(PEERS_OBJ)/grpc_%.o $(PEERS_OBJ)/gen_peer.pb.o $(PEERS_OBJ)/gen_peer.grpc.pb.o \
    $(PEERS_OBJ)/peerbench.o
	@mkdir -p $(@D)
	$(CXX) -pthread -o $@ $^ $(GRPC_LIBS)
