// examples/api_tour.cc — the README's tour of the API: a context, a pool of registered
// buffers, an endpoint over loopback (both ends in this process), tagged send/recv,
// and one-sided put/get/atomics into memory the other side registered. The program
// between the markers is README.md's "The API in one screen" verbatim (the ctest
// readme_excerpts keeps the two identical); CTest runs it, and it exits non-zero when
// anything it shows did not happen.
// [readme-api-tour begin]
#include <array>
#include <cstdio>
#include <cstring>
#include <vector>

#include "remora/remora.h"
using namespace std::chrono_literals;

int main() {
  auto ctx = remora::Context::create().value();        // REMORA_* env configures it
  remora::Pool pool(*ctx, {.arena_bytes = 16 << 20});  // arenas registered once, buffers reused
  remora::Buffer out = pool.allocate(4 << 20).value();
  remora::Buffer in = pool.allocate(4 << 20).value();
  for (size_t i = 0; i < out.size(); ++i) out.data()[i] = std::byte(i % 251);

  // Both ends in this process. Across hosts: listen("0.0.0.0:7100") there, connect("host:7100", 5s) here.
  auto listener = ctx->listen("127.0.0.1:0").value();       // port 0: the kernel picks one
  auto ep = ctx->connect(listener->address(), 5s).value();  // the initiator's endpoint
  auto peer = listener->accept(5s).value();                 // the target's endpoint

  remora::Request rx = peer->recv(in.span(), remora::Tag{2});  // post before or after arrival
  remora::Request tx = ep->send(out.span(), remora::Tag{2});   // async; many may be in flight
  const remora::Request both[] = {rx, tx};
  remora::Status s = remora::wait_all(both, 10s);               // spins briefly, then blocks
  if (!s) std::fprintf(stderr, "%s\n", s.to_string().c_str());  // e.g. "peer_failed: ..."

  // One-sided: the target registers memory and sends its key (40 bytes) any way it likes.
  std::vector<uint64_t> mem(1 << 16);
  auto rights = remora::Access::kRemoteRead | remora::Access::kRemoteWrite | remora::Access::kRemoteAtomic;
  remora::Region region = ctx->register_memory(mem.data(), mem.size() * sizeof(uint64_t), rights).value();
  std::array<std::byte, 40> key_bytes = region.remote_key().serialize();
  // ... and the initiator, given key_bytes:
  remora::RemoteKey key = remora::RemoteKey::deserialize(key_bytes).value();
  ep->put(out.span().first(4096), key, /*remote_offset=*/0, {.notify = 42});  // completes once visible there
  uint64_t old = 0;
  ep->fetch_add(&old, key, /*remote_offset=*/8192, 1);  // old: the value before the add
  remora::Status fenced = ep->flush().wait(10s);        // fence: both done, or the first failure
  std::vector<std::byte> back(4096);
  remora::Request get = ep->get(back, key, /*remote_offset=*/0);    // flush() does not cover gets:
  remora::Status got = get.wait(10s);                               // wait on each
  remora::Notification note = peer->wait_notification(5s).value();  // target side: value 42, once

  const bool ok = s && fenced && got && note.value == 42 && mem[8192 / 8] == old + 1 &&
                  std::memcmp(in.data(), out.data(), out.size()) == 0 &&
                  std::memcmp(back.data(), out.data(), back.size()) == 0;
  std::printf("%s\n", ok ? "every transfer arrived intact" : "something went wrong");
  return ok ? 0 : 1;
}
// [readme-api-tour end]
