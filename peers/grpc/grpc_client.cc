// grpc-client: the gRPC peer's client. One channel per thread (its own
// subchannel and TCP connection), unary calls through the generated stub;
// peerbench checks the results and times the calls.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "peer.grpc.pb.h"
#include "peerbench.h"

namespace
{

struct Conn {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<rpcspeer::Peer::Stub> stub;
    // The last call's reply: its bytes stay valid until the next call.
    rpcspeer::Empty empty;
    rpcspeer::Int i;
    rpcspeer::Sum sum;
    rpcspeer::Str str;
    rpcspeer::Bytes bytes;
};

void *peer_connect(const struct pb_config *cfg, char *err, size_t n)
{
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1); // a connection of its own per thread
    args.SetMaxReceiveMessageSize(PB_MAX_SIZE * 2 + 1024);
    auto c = new Conn;
    c->channel =
        grpc::CreateCustomChannel(std::string(cfg->server) + ":" + std::to_string(cfg->port ? cfg->port : 7500),
                                  grpc::InsecureChannelCredentials(), args);
    auto deadline =
        std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int>(cfg->deadline_s * 1000));
    if (!c->channel->WaitForConnected(deadline)) {
        std::snprintf(err, n, "no connection to %s:%d within %.0f s", cfg->server, cfg->port ? cfg->port : 7500,
                      cfg->deadline_s);
        delete c;
        return nullptr;
    }
    c->stub = rpcspeer::Peer::NewStub(c->channel);
    return c;
}

int peer_call(void *conn, const struct pb_config *cfg, const struct pb_work *w, struct pb_result *r, char *err,
              size_t n)
{
    auto c = static_cast<Conn *>(conn);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int>(cfg->deadline_s * 1000)));
    grpc::Status st;
    switch (cfg->proc) {
    case PB_NULL: {
        rpcspeer::Empty a;
        st = c->stub->Null(&ctx, a, &c->empty);
        break;
    }
    case PB_ADD: {
        rpcspeer::AddArgs a;
        a.set_a(w->a);
        a.set_b(w->b);
        st = c->stub->Add(&ctx, a, &c->i);
        r->i = c->i.i();
        break;
    }
    case PB_SUM: {
        rpcspeer::Ints a;
        a.mutable_v()->Add(w->ints, w->ints + w->size);
        st = c->stub->SumInts(&ctx, a, &c->sum);
        r->sum = c->sum.sum();
        break;
    }
    case PB_CONCAT: {
        rpcspeer::ConcatArgs a;
        a.set_s1(w->s1, w->len1);
        a.set_s2(w->s2, w->len2);
        st = c->stub->Concat(&ctx, a, &c->str);
        r->data = reinterpret_cast<const uint8_t *>(c->str.s().data());
        r->len = static_cast<uint32_t>(c->str.s().size());
        break;
    }
    case PB_ECHO:
    case PB_MAXARG: {
        rpcspeer::Bytes a;
        a.set_data(w->data, w->size);
        if (cfg->proc == PB_MAXARG) {
            st = c->stub->MaxArg(&ctx, a, &c->empty);
            break;
        }
        st = c->stub->Echo(&ctx, a, &c->bytes);
        r->data = reinterpret_cast<const uint8_t *>(c->bytes.data().data());
        r->len = static_cast<uint32_t>(c->bytes.data().size());
        break;
    }
    case PB_MAXRESULT: {
        rpcspeer::Count a;
        a.set_n(w->size);
        st = c->stub->MaxResult(&ctx, a, &c->bytes);
        r->data = reinterpret_cast<const uint8_t *>(c->bytes.data().data());
        r->len = static_cast<uint32_t>(c->bytes.data().size());
        break;
    }
    default: std::snprintf(err, n, "unknown procedure %d", cfg->proc); return PB_ERROR;
    }
    if (!st.ok()) {
        std::snprintf(err, n, "status %d: %s", static_cast<int>(st.error_code()), st.error_message().c_str());
        return PB_ERROR;
    }
    return PB_OK;
}

void peer_close(void *conn) { delete static_cast<Conn *>(conn); }

} // namespace

int main(int argc, char **argv)
{
    static const struct pb_ops ops = { peer_connect, peer_call, peer_close };
    return pb_main(argc, argv, "grpc", "tcp", &ops);
}
