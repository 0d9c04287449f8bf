// remora_coll_peer — one rank of a bootstrap test, started by `remora run` or by the
// test itself: Communicator::init from the environment, then a ring exchange with
// Communicator::send/recv whose data every rank checks.
//
//   remora_coll_peer                 init + ring exchange; prints "rank R of N ok"
//   remora_coll_peer --fail-rank K   rank K exits with code 3 before init (the launcher
//                                    must report it and stop the others)
// On failure prints "rank R: <status>" on stdout and exits 2.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "remora/remora.h"

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? -1 : std::atoi(v);
}

int fail(int rank, const remora::Status& s) {
  std::printf("rank %d: %s\n", rank, s.to_string().c_str());
  std::fflush(stdout);
  return 2;
}

/// Deterministic bytes for the message from `from` to `to`.
std::vector<uint32_t> payload(int from, int to, size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>(from * 1000003u + to * 7919u + i * 2654435761u);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int env_rank = env_int("REMORA_RANK");
  if (argc == 3 && std::strcmp(argv[1], "--fail-rank") == 0 && env_rank == std::atoi(argv[2])) {
    std::printf("rank %d: failing on purpose\n", env_rank);
    return 3;
  }
  auto ctx = remora::Context::create();
  if (!ctx) return fail(env_rank, ctx.status());
  auto comm = remora::Communicator::init(**ctx);
  if (!comm) return fail(env_rank, comm.status());
  remora::Communicator& c = **comm;
  const int rank = c.rank(), size = c.size();
  if (rank != env_rank || size != env_int("REMORA_WORLD_SIZE")) {
    return fail(rank, remora::Status(remora::StatusCode::kInternal, "rank/size differ from the environment"));
  }
  if (size > 1) {
    // 100k elements: above the eager limit, so the rendezvous path runs too.
    constexpr size_t kCount = 100'000;
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const auto out = payload(rank, next, kCount);
    std::vector<uint32_t> in(kCount);
    remora::Request r = c.irecv(in.data(), kCount, remora::DataType::kUint32, prev, remora::Tag{7});
    if (auto s = c.send(out.data(), kCount, remora::DataType::kUint32, next, remora::Tag{7}); !s) return fail(rank, s);
    if (auto s = r.wait(std::chrono::seconds(30)); !s) return fail(rank, s);
    if (in != payload(prev, rank, kCount)) {
      return fail(rank, remora::Status(remora::StatusCode::kInternal, "ring exchange: wrong data"));
    }
  }
  std::printf("rank %d of %d ok\n", rank, size);
  std::fflush(stdout);
  return 0;
}
