// grpc-server: the gRPC peer's server: peer.proto's unary methods on a
// synchronous gRPC C++ server over TCP (plaintext HTTP/2).
#include <getopt.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "peer.grpc.pb.h"
#include "peerbench.h"

namespace
{

volatile sig_atomic_t stop_requested = 0;

void on_signal(int) { stop_requested = 1; }

class PeerService final : public rpcspeer::Peer::Service
{
    grpc::Status Null(grpc::ServerContext *, const rpcspeer::Empty *, rpcspeer::Empty *) override
    {
        return grpc::Status::OK;
    }
    grpc::Status Add(grpc::ServerContext *, const rpcspeer::AddArgs *a, rpcspeer::Int *r) override
    {
        r->set_i(static_cast<int32_t>(static_cast<uint32_t>(a->a()) + static_cast<uint32_t>(a->b())));
        return grpc::Status::OK;
    }
    grpc::Status SumInts(grpc::ServerContext *, const rpcspeer::Ints *a, rpcspeer::Sum *r) override
    {
        int64_t s = 0;
        for (int32_t v : a->v())
            s += v;
        r->set_sum(s);
        return grpc::Status::OK;
    }
    grpc::Status Concat(grpc::ServerContext *, const rpcspeer::ConcatArgs *a, rpcspeer::Str *r) override
    {
        r->set_s(a->s1() + a->s2());
        return grpc::Status::OK;
    }
    grpc::Status Echo(grpc::ServerContext *, const rpcspeer::Bytes *a, rpcspeer::Bytes *r) override
    {
        r->set_data(a->data());
        return grpc::Status::OK;
    }
    grpc::Status MaxArg(grpc::ServerContext *, const rpcspeer::Bytes *, rpcspeer::Empty *) override
    {
        return grpc::Status::OK;
    }
    grpc::Status MaxResult(grpc::ServerContext *, const rpcspeer::Count *a, rpcspeer::Bytes *r) override
    {
        if (a->n() > PB_MAX_SIZE)
            return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "maxresult: too large");
        std::string s(a->n(), '\0');
        for (uint32_t i = 0; i < a->n(); i++)
            s[i] = static_cast<char>(pb_pattern_byte(i));
        r->set_data(std::move(s));
        return grpc::Status::OK;
    }
};

void usage(FILE *f)
{
    std::fprintf(f,
                 "usage: grpc-server [options]\n"
                 "Serve the peer procedures (null add sum concat echo maxarg maxresult) as gRPC unary calls.\n\n"
                 "  --bind ADDR        IPv4 address to listen on (default 127.0.0.1)\n"
                 "  --port N           TCP port (default 7500)\n"
                 "  --cpu N            pin the server (all its threads) to CPU N\n"
                 "  --duration S       exit after S seconds (default 600)\n"
                 "  --ready-file PATH  write \"PID PORT\" once listening\n");
}

} // namespace

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "bind", 1, 0, 'b' },       { "port", 1, 0, 'p' }, { "cpu", 1, 0, 'C' }, { "duration", 1, 0, 'd' },
        { "ready-file", 1, 0, 'r' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 }
    };
    std::string bind = "127.0.0.1";
    const char *ready = nullptr;
    int c, port = 7500, cpu = -1, duration = 600;
    char *end;
    while ((c = getopt_long(argc, argv, "", opts, nullptr)) != -1) {
        switch (c) {
        case 'b': bind = optarg; break;
        case 'p':
            port = static_cast<int>(std::strtol(optarg, &end, 10));
            if (*end || port <= 0 || port > 65535) {
                usage(stderr);
                return 2;
            }
            break;
        case 'C':
            cpu = static_cast<int>(std::strtol(optarg, &end, 10));
            if (*end || cpu < 0) {
                usage(stderr);
                return 2;
            }
            break;
        case 'd':
            duration = static_cast<int>(std::strtol(optarg, &end, 10));
            if (*end || duration <= 0) {
                usage(stderr);
                return 2;
            }
            break;
        case 'r': ready = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    // Pinned before gRPC starts its threads: they inherit the mask.
    if (cpu >= 0 && pb_pin_cpu(cpu)) {
        std::fprintf(stderr, "grpc-server: sched_setaffinity(CPU %d): %s\n", cpu, std::strerror(errno));
        return 1;
    }
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);

    PeerService service;
    grpc::ServerBuilder builder;
    int bound = 0;
    builder.AddListeningPort(bind + ":" + std::to_string(port), grpc::InsecureServerCredentials(), &bound);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server || bound == 0) {
        std::fprintf(stderr, "grpc-server: cannot listen on %s:%d\n", bind.c_str(), port);
        return 1;
    }
    if (pb_write_ready(ready, bound)) {
        server->Shutdown();
        return 1;
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(duration);
    while (!stop_requested && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server->Wait();
    return 0;
}
