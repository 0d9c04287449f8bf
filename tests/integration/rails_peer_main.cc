// remora_rails_peer — one side of a transfer over rails (rails_test.cc): run in a
// network namespace with REMORA_RAILS in its environment.
//   --role=listen --address=HOST:0 --size=N --seed=S   prints "PORT <n>", accepts one
//       endpoint, receives N bytes (tag 1) and checks every byte, then answers (tag 2)
//   --role=connect --address=HOST:PORT --size=N --seed=S   sends N bytes (tag 1) and
//       waits for the answer
// Both then print one line per rail of the endpoint:
//   RAIL <state> <local> <peer> <interface|-> <streams> <chunks_sent> <chunks_received>
//        <bytes_sent> <bytes_received> <reason...>
// and exit 0; anything wrong is a message on stderr and exit 1.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "remora/context.h"
#include "remora/endpoint.h"
#include "support/test_data.h"

namespace {

using namespace remora;

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback = "") {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "rails peer: %s: %s %s\n", what.c_str(), std::string(to_string(s.code())).c_str(),
               s.message().c_str());
  return 1;
}

void print_rails(const Endpoint& ep) {
  const std::string sealed = ep.stats().encryption;
  std::printf("SEALED %s\n", sealed.empty() ? "-" : sealed.c_str());
  for (const RailStats& r : ep.stats().rails) {
    std::printf("RAIL %s %s %s %s %u %lu %lu %lu %lu %s\n", r.state.c_str(), r.local_address.c_str(),
                r.peer_address.empty() ? "-" : r.peer_address.c_str(), r.interface.empty() ? "-" : r.interface.c_str(),
                r.streams, static_cast<unsigned long>(r.chunks_sent), static_cast<unsigned long>(r.chunks_received),
                static_cast<unsigned long>(r.bytes_sent), static_cast<unsigned long>(r.bytes_received),
                r.reason.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = arg(argc, argv, "role");
  const std::string address = arg(argc, argv, "address");
  const uint64_t size = std::stoull(arg(argc, argv, "size", "1048576"));
  const uint64_t seed = std::stoull(arg(argc, argv, "seed", "1"));
  const auto timeout = std::chrono::seconds(60);
  auto ctx = Context::create(ContextOptions{});
  if (!ctx) return fail("Context::create", ctx.status());
  std::shared_ptr<Endpoint> ep;
  std::vector<std::byte> buffer(size);
  std::byte answer[8] = {};
  if (role == "listen") {
    auto listener = (*ctx)->listen(address);
    if (!listener) return fail("listen", listener.status());
    std::printf("PORT %u\n", (*listener)->port());
    std::fflush(stdout);
    auto accepted = (*listener)->accept(timeout);
    if (!accepted) return fail("accept", accepted.status());
    ep = *accepted;
    if (Status s = ep->recv(buffer, Tag{1}).wait(timeout); !s) return fail("recv", s);
    const size_t bad = itest::first_mismatch(seed, 0, buffer);
    if (bad != SIZE_MAX) {
      std::fprintf(stderr, "rails peer: byte %zu of %lu differs\n", bad, static_cast<unsigned long>(size));
      return 1;
    }
    if (Status s = ep->send(answer, Tag{2}).wait(timeout); !s) return fail("send the answer", s);
  } else if (role == "connect") {
    auto connected = (*ctx)->connect(address, timeout);
    if (!connected) return fail("connect", connected.status());
    ep = *connected;
    itest::fill_stream(seed, 0, buffer);
    if (Status s = ep->send(buffer, Tag{1}).wait(timeout); !s) return fail("send", s);
    if (Status s = ep->recv(answer, Tag{2}).wait(timeout); !s) return fail("recv the answer", s);
  } else {
    std::fprintf(stderr, "rails peer: --role=listen or --role=connect\n");
    return 2;
  }
  print_rails(*ep);
  ep->close();
  return 0;
}
