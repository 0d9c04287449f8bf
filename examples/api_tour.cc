// examples/api_tour.cc — the README's tour of the API: a context, a pool of registered
// buffers, an endpoint over loopback (both ends in this process), tagged send/recv,
// and one-sided put/get/atomics into memory the other side registered.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "remora/remora.h"

using namespace std::chrono_literals;

int fail(const char* what, const remora::Status& s) {
  std::fprintf(stderr, "api_tour: %s: %s\n", what, s.to_string().c_str());
  return 1;
}

int main() {
  auto ctx = remora::Context::create();  // REMORA_* environment variables configure it
  if (!ctx) return fail("context", ctx.status());
  remora::Pool pool(**ctx, {.arena_bytes = 16 << 20});  // registers arenas once, reuses them

  auto listener = (*ctx)->listen("127.0.0.1:0");  // port 0: the kernel picks one
  if (!listener) return fail("listen", listener.status());
  auto client = (*ctx)->connect("127.0.0.1:" + std::to_string((*listener)->port()), 5s);
  if (!client) return fail("connect", client.status());
  auto server = (*listener)->accept(5s);
  if (!server) return fail("accept", server.status());

  constexpr size_t kSize = 4 << 20;  // large enough to go in chunks over the data streams
  auto out = pool.allocate(kSize);
  auto in = pool.allocate(kSize);
  if (!out || !in) return fail("allocate", out ? in.status() : out.status());
  for (size_t i = 0; i < kSize; ++i) out->data()[i] = static_cast<std::byte>(i * 7 + 1);

  // A small message and a large one, with different tags: the receive for tag 2 is
  // posted first, and each matches only its own tag.
  const char hello[] = "hello, remora";
  char greeting[sizeof hello] = {};
  remora::Request big_rx = (*server)->recv(in->span(), remora::Tag{2});
  remora::Request small_rx = (*server)->recv(std::as_writable_bytes(std::span(greeting)), remora::Tag{1});
  remora::Request big_tx = (*client)->send(out->span(), remora::Tag{2});
  remora::Request small_tx = (*client)->send(std::as_bytes(std::span(hello)), remora::Tag{1});

  const remora::Request all[] = {big_rx, small_rx, big_tx, small_tx};
  if (auto s = remora::wait_all(all, 10s); !s) return fail("transfer", s);
  if (big_rx.bytes() != kSize || std::memcmp(in->data(), out->data(), kSize) != 0) {
    std::fprintf(stderr, "api_tour: the 4 MiB message arrived damaged\n");
    return 1;
  }
  // One-sided: the server registers a window and hands its key over (here directly;
  // between processes, send key.serialize() in a message). Its application makes no
  // further call: its progress thread serves the put, the get and the atomic.
  std::vector<uint64_t> window(kSize / sizeof(uint64_t));
  auto region = (*ctx)->register_memory(window.data(), kSize,
                                        remora::Access::kRemoteRead | remora::Access::kRemoteWrite |
                                            remora::Access::kRemoteAtomic);
  if (!region) return fail("register", region.status());
  const remora::RemoteKey key = region->remote_key();
  const auto payload = out->span().first(kSize - 8);  // the last word is a counter
  remora::Request put = (*client)->put(payload, key, 0, {.notify = 42});  // remote completion
  uint64_t before = 0;
  remora::Request add = (*client)->fetch_add(&before, key, kSize - 8, 5);
  if (auto s = (*client)->flush().wait(10s); !s) return fail("flush", s);  // both are visible now
  auto note = (*server)->wait_notification(5s);
  if (!note || note->value != 42) return fail("notification", note ? remora::Status::ok() : note.status());
  std::vector<std::byte> back(kSize);
  if (auto s = (*client)->get(back, key, 0).wait(10s); !s) return fail("get", s);
  if (!put.done() || !add.done() || std::memcmp(back.data(), payload.data(), payload.size()) != 0 ||
      window.back() != before + 5) {
    std::fprintf(stderr, "api_tour: the one-sided round trip came back damaged\n");
    return 1;
  }
  std::printf("put %zu bytes with notification %llu and got them back intact; fetch_add: %llu -> %llu\n",
              payload.size(), static_cast<unsigned long long>(note->value), static_cast<unsigned long long>(before),
              static_cast<unsigned long long>(window.back()));

  const auto st = (*client)->stats();
  const auto ps = pool.stats();
  std::printf("received \"%s\" (tag 1) and %zu verified bytes (tag 2) in %llu chunks over %u streams\n", greeting,
              big_rx.bytes(), static_cast<unsigned long long>(st.chunks_sent), (*client)->data_streams());
  std::printf("pool: %llu arenas, %llu bytes registered, %llu buffers in use\n",
              static_cast<unsigned long long>(ps.registrations), static_cast<unsigned long long>(ps.bytes_registered),
              static_cast<unsigned long long>(ps.buffers_in_use));
  return 0;
}
