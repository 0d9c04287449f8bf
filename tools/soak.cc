// tools/soak.cc — one rank of `remora soak` (soak.h says what it runs and checks).
#include "soak.h"

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "remora/remora.h"

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer's runtime (GCC 12 ships no header declaring it).
extern "C" void __sanitizer_purge_allocator();
#endif

namespace remora::tools {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kOpTimeout = 60s;
constexpr Tag kHello{0x50AC0001};
constexpr uint64_t kSendTagBase = 0x50AC1000;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Deterministic content: the byte at stream position p depends only on (seed, p), so
/// any part of a stream can be made or checked on its own.
uint8_t content_byte(uint64_t seed, uint64_t p) {
  return static_cast<uint8_t>(mix(seed ^ mix(p >> 3)) >> (8 * (p & 7)));
}

void fill(uint64_t seed, uint64_t offset, std::span<std::byte> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::byte{content_byte(seed, offset + i)};
}

bool matches(uint64_t seed, uint64_t offset, std::span<const std::byte> got) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != std::byte{content_byte(seed, offset + i)}) return false;
  }
  return true;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix(state_++); }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }

 private:
  uint64_t state_;
};

int open_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n - 1;  // not the directory being read
}

long rss_kib() {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_purge_allocator();  // empty the quarantine: RSS then follows what is live
#endif
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

enum Kind : int { kSendRecv, kPut, kPutNotify, kGet, kAtomics, kCollective, kKinds };
constexpr const char* kKindNames[kKinds] = {"send/recv", "put", "put+notify", "get", "atomics", "collective"};

/// Counters every rank keeps; summed over the ranks at the end.
struct Counters {
  int64_t ops[kKinds] = {};
  int64_t fetch_adds = 0, compare_swaps = 0;
  int64_t bytes = 0;  ///< bytes moved and verified
  int64_t errors = 0;
};

class SoakRank {
 public:
  explicit SoakRank(const SoakOptions& o) : o_(o) {}
  int run();

 private:
  Status setup();
  Status round(uint64_t r);
  Status op_send_recv(uint64_t r, Rng& rng, const std::vector<size_t>& sizes);
  Status op_put(uint64_t r, Rng& rng, const std::vector<size_t>& sizes, bool notify);
  Status op_get(uint64_t r, Rng& rng, const std::vector<size_t>& sizes);
  Status op_atomics(uint64_t r, Rng& rng);
  Status op_collective(uint64_t r, Rng& rng, const std::vector<size_t>& sizes);
  Status wrong(const std::string& what) {
    ++c_.errors;
    return Status(StatusCode::kInternal, "wrong bytes: " + what);
  }
  Status waited(Request& req, const char* what) {
    const Status s = req.wait(kOpTimeout);
    if (!s) ++c_.errors;
    return s ? s : s.with_context(what);
  }
  uint64_t content_seed(uint64_t r, int rank) const {
    return mix(o_.seed ^ mix(r * 4099 + static_cast<uint64_t>(rank)));
  }
  uint64_t zone_seed(int rank) const { return mix(o_.seed * 31 + static_cast<uint64_t>(rank) + 7); }
  size_t slot(int rank) const { return static_cast<size_t>(rank) * o_.max_size; }
  size_t zone() const { return static_cast<size_t>(n_) * o_.max_size; }
  size_t fa_word() const { return zone() + o_.max_size; }
  size_t cas_word() const { return fa_word() + 8; }

  SoakOptions o_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Communicator> comm_;
  int me_ = 0, n_ = 1;
  std::vector<std::byte> mem_;
  std::optional<Region> region_;
  std::vector<RemoteKey> keys_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::shared_ptr<Endpoint>> out_, in_;  ///< to each rank (connected) / from each (accepted)
  std::vector<std::byte> send_, recv_;
  std::vector<int64_t> coll_;
  std::vector<uint64_t> model_;  ///< what each rank's two atomic words hold (both the same)
  Counters c_;
};

Status SoakRank::setup() {
  REMORA_ASSIGN_OR_RETURN(ctx_, Context::create());
  REMORA_ASSIGN_OR_RETURN(comm_,
                          Communicator::init(*ctx_, CommOptions{.timeout = std::chrono::milliseconds(kOpTimeout)}));
  me_ = comm_->rank();
  n_ = comm_->size();
  send_.resize(o_.max_size);
  recv_.resize(o_.max_size);
  coll_.resize(o_.max_size / 8 * static_cast<size_t>(n_) + 1);
  mem_.resize(zone() + o_.max_size + 64);
  fill(zone_seed(me_), 0, std::span(mem_).subspan(zone(), o_.max_size));
  REMORA_ASSIGN_OR_RETURN(Region region,
                          ctx_->register_memory(mem_.data(), mem_.size(),
                                                Access::kRemoteRead | Access::kRemoteWrite | Access::kRemoteAtomic));
  region_.emplace(std::move(region));

  // Keys and listening ports, everyone's to everyone.
  std::vector<std::byte> all_keys(RemoteKey::kSerializedSize * static_cast<size_t>(n_));
  const auto mine = region_->remote_key().serialize();
  REMORA_RETURN_IF_ERROR(comm_->allgather(mine.data(), all_keys.data(), mine.size(), DataType::kUint8));
  for (int i = 0; i < n_; ++i) {
    REMORA_ASSIGN_OR_RETURN(RemoteKey k,
                            RemoteKey::deserialize(std::span(all_keys).subspan(
                                static_cast<size_t>(i) * RemoteKey::kSerializedSize, RemoteKey::kSerializedSize)));
    keys_.push_back(k);
  }
  const char* host = std::getenv("REMORA_HOST");
  const std::string here = host != nullptr && *host != '\0' ? host : "127.0.0.1";
  REMORA_ASSIGN_OR_RETURN(listener_, ctx_->listen(here + ":0"));
  std::vector<std::string> addresses;
  {
    std::vector<char> name(64, '\0'), names(64 * static_cast<size_t>(n_));
    const std::string a = listener_->address();
    std::memcpy(name.data(), a.data(), std::min(a.size(), name.size() - 1));
    REMORA_RETURN_IF_ERROR(comm_->allgather(name.data(), names.data(), name.size(), DataType::kUint8));
    for (int i = 0; i < n_; ++i) addresses.emplace_back(names.data() + 64 * i);
  }
  out_.resize(static_cast<size_t>(n_));
  in_.resize(static_cast<size_t>(n_));
  const uint64_t hello = static_cast<uint64_t>(me_);
  for (int i = 0; i < n_; ++i) {
    if (i == me_) continue;
    REMORA_ASSIGN_OR_RETURN(out_[i], ctx_->connect(addresses[i], kOpTimeout));
    REMORA_RETURN_IF_ERROR(out_[i]->send(std::as_bytes(std::span(&hello, 1)), kHello).wait(kOpTimeout));
  }
  for (int i = 0; i < n_ - 1; ++i) {
    REMORA_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> ep, listener_->accept(kOpTimeout));
    uint64_t who = 0;
    REMORA_RETURN_IF_ERROR(ep->recv(std::as_writable_bytes(std::span(&who, 1)), kHello).wait(kOpTimeout));
    if (who >= static_cast<uint64_t>(n_) || in_[who]) return Status(StatusCode::kInternal, "bad hello");
    in_[who] = std::move(ep);
  }
  return comm_->barrier();
}

Status SoakRank::op_send_recv(uint64_t r, Rng& rng, const std::vector<size_t>& sizes) {
  const int k = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(n_ - 1)));
  const int dst = (me_ + k) % n_, src = (me_ - k + n_) % n_;
  const Tag tag{kSendTagBase + r % 64};
  Request rx = in_[src]->recv(std::span(recv_).first(sizes[src]), tag);
  fill(content_seed(r, me_), 0, std::span(send_).first(sizes[me_]));
  Request tx = out_[dst]->send(std::span(send_).first(sizes[me_]), tag);
  REMORA_RETURN_IF_ERROR(waited(tx, "send"));
  REMORA_RETURN_IF_ERROR(waited(rx, "recv"));
  if (o_.inject_corruption && me_ == 1 && r >= 20 && sizes[src] > 0) recv_[sizes[src] / 2] ^= std::byte{1};
  if (rx.bytes() != sizes[src] || !matches(content_seed(r, src), 0, std::span(recv_).first(sizes[src]))) {
    return wrong(fmt::format("round {}: message from rank {}", r, src));
  }
  c_.ops[kSendRecv] += 2;
  c_.bytes += static_cast<int64_t>(sizes[src]);
  return Status::ok();
}

Status SoakRank::op_put(uint64_t r, Rng& rng, const std::vector<size_t>& sizes, bool notify) {
  const int k = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(n_ - 1)));
  const int dst = (me_ + k) % n_, src = (me_ - k + n_) % n_;
  fill(content_seed(r, me_), 0, std::span(send_).first(sizes[me_]));
  const uint64_t value = (r << 16) | static_cast<uint64_t>(me_);
  Request put = out_[dst]->put(std::span(send_).first(sizes[me_]), keys_[dst], slot(me_),
                               notify ? PutOptions{.notify = value} : PutOptions{});
  REMORA_RETURN_IF_ERROR(waited(put, "put"));
  if (notify) {
    // The notification says the data is there: no barrier needed before the check.
    auto note = in_[src]->wait_notification(kOpTimeout);
    if (!note) {
      ++c_.errors;
      return note.status().with_context("wait_notification");
    }
    if (note->value != ((r << 16) | static_cast<uint64_t>(src)) || note->offset != slot(src) ||
        note->length != sizes[src]) {
      return wrong(fmt::format("round {}: notification from rank {}", r, src));
    }
  } else {
    REMORA_RETURN_IF_ERROR(comm_->barrier());
  }
  if (!matches(content_seed(r, src), 0, std::span(mem_).subspan(slot(src), sizes[src]))) {
    return wrong(fmt::format("round {}: put from rank {}", r, src));
  }
  ++c_.ops[notify ? kPutNotify : kPut];
  c_.bytes += static_cast<int64_t>(sizes[src]);
  return Status::ok();
}

Status SoakRank::op_get(uint64_t r, Rng& rng, const std::vector<size_t>& sizes) {
  const int k = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(n_ - 1)));
  std::vector<uint64_t> offsets(static_cast<size_t>(n_));
  for (int i = 0; i < n_; ++i) offsets[i] = rng.below(o_.max_size - sizes[i] + 1);
  const int dst = (me_ + k) % n_;
  const auto into = std::span(recv_).first(sizes[me_]);
  Request get = out_[dst]->get(into, keys_[dst], zone() + offsets[me_]);
  REMORA_RETURN_IF_ERROR(waited(get, "get"));
  if (!matches(zone_seed(dst), offsets[me_], into)) return wrong(fmt::format("round {}: get from rank {}", r, dst));
  ++c_.ops[kGet];
  c_.bytes += static_cast<int64_t>(sizes[me_]);
  return Status::ok();
}

Status SoakRank::op_atomics(uint64_t r, Rng& rng) {
  const int target = static_cast<int>(r % static_cast<uint64_t>(n_));
  const uint64_t m = 1 + rng.below(32);
  const uint64_t base = model_[target], total = m * static_cast<uint64_t>(n_ - 1);
  if (target != me_) {
    // fetch_add: the old values this rank sees rise strictly (others' adds interleave)
    // and stay within what this round adds.
    std::vector<uint64_t> olds(m);
    std::vector<Request> reqs;
    for (uint64_t i = 0; i < m; ++i) reqs.push_back(out_[target]->fetch_add(&olds[i], keys_[target], fa_word(), 1));
    for (auto& q : reqs) REMORA_RETURN_IF_ERROR(waited(q, "fetch_add"));
    for (uint64_t i = 0; i < m; ++i) {
      if (olds[i] < base || olds[i] >= base + total || (i > 0 && olds[i] <= olds[i - 1])) {
        return wrong(
            fmt::format("round {}: fetch_add returned {} (the model: {} to {})", r, olds[i], base, base + total));
      }
    }
    c_.fetch_adds += static_cast<int64_t>(m);
    // compare_swap: m increments, each retried with the value the last attempt saw.
    uint64_t expected = base;
    for (uint64_t done = 0; done < m;) {
      uint64_t old = 0;
      Request q =
          out_[target]->compare_swap(&old, keys_[target], cas_word(), {.expected = expected, .desired = expected + 1});
      REMORA_RETURN_IF_ERROR(waited(q, "compare_swap"));
      ++c_.compare_swaps;
      if (old < base || old >= base + total) {
        return wrong(fmt::format("round {}: compare_swap saw {} (the model: {} to {})", r, old, base, base + total));
      }
      if (old == expected) ++done;
      expected = old == expected ? expected + 1 : old;
    }
  }
  REMORA_RETURN_IF_ERROR(comm_->barrier());
  model_[target] += total;
  if (target == me_) {
    const uint64_t fa = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(mem_.data() + fa_word())).load();
    const uint64_t cas = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(mem_.data() + cas_word())).load();
    if (fa != model_[me_] || cas != model_[me_]) {
      return wrong(fmt::format("round {}: atomic words {} and {}, the model says {}", r, fa, cas, model_[me_]));
    }
  }
  ++c_.ops[kAtomics];
  return Status::ok();
}

Status SoakRank::op_collective(uint64_t r, Rng& rng, const std::vector<size_t>& sizes) {
  const uint64_t which = rng.below(3);
  const int root = static_cast<int>(rng.below(static_cast<uint64_t>(n_)));
  const size_t count = sizes[0] / 8;  // int64 elements of the allreduce
  if (which == 0) {
    for (size_t i = 0; i < count; ++i) coll_[i] = static_cast<int64_t>(mix(r + i) % 1000) * (me_ + 1);
    Status s = comm_->allreduce(kInPlace, coll_.data(), count, DataType::kInt64, ReduceOp::kSum);
    if (!s) ++c_.errors;
    REMORA_RETURN_IF_ERROR(s.with_context("allreduce"));
    const int64_t ranks = static_cast<int64_t>(n_) * (n_ + 1) / 2;
    for (size_t i = 0; i < count; ++i) {
      if (coll_[i] != static_cast<int64_t>(mix(r + i) % 1000) * ranks)
        return wrong(fmt::format("round {}: allreduce", r));
    }
    c_.bytes += static_cast<int64_t>(count * 8);
  } else if (which == 1) {
    const auto buf = std::span(recv_).first(sizes[0]);
    if (me_ == root) fill(content_seed(r, root), 0, buf);
    Status s = comm_->broadcast(buf.data(), buf.size(), DataType::kUint8, root);
    if (!s) ++c_.errors;
    REMORA_RETURN_IF_ERROR(s.with_context("broadcast"));
    if (!matches(content_seed(r, root), 0, buf)) return wrong(fmt::format("round {}: broadcast", r));
    c_.bytes += static_cast<int64_t>(buf.size());
  } else {
    const size_t each = sizes[0] / static_cast<size_t>(n_);  // bytes per rank: n of them fit the buffer
    fill(content_seed(r, me_), 0, std::span(send_).first(each));
    Status s = comm_->allgather(send_.data(), recv_.data(), each, DataType::kUint8);
    if (!s) ++c_.errors;
    REMORA_RETURN_IF_ERROR(s.with_context("allgather"));
    for (int i = 0; i < n_; ++i) {
      if (!matches(content_seed(r, i), 0, std::span(recv_).subspan(static_cast<size_t>(i) * each, each))) {
        return wrong(fmt::format("round {}: allgather block of rank {}", r, i));
      }
    }
    c_.bytes += static_cast<int64_t>(each) * n_;
  }
  ++c_.ops[kCollective];
  return Status::ok();
}

Status SoakRank::round(uint64_t r) {
  Rng rng(mix(o_.seed ^ mix(r)));
  const Kind kind = n_ == 1 ? kCollective : static_cast<Kind>(rng.below(kKinds));
  // Sizes from 0 B to max_size, spread over the orders of magnitude (0 B, a few bytes,
  // eager, one chunk, many chunks): a random power of two, then a size below it.
  std::vector<size_t> sizes(static_cast<size_t>(n_));
  for (auto& s : sizes) {
    const uint64_t ceiling = std::min<uint64_t>(o_.max_size, uint64_t{1} << rng.below(24));
    s = static_cast<size_t>(rng.below(ceiling + 1));
  }
  switch (kind) {
    case kSendRecv: return op_send_recv(r, rng, sizes);
    case kPut: return op_put(r, rng, sizes, false);
    case kPutNotify: return op_put(r, rng, sizes, true);
    case kGet: return op_get(r, rng, sizes);
    case kAtomics: return op_atomics(r, rng);
    default: return op_collective(r, rng, sizes);
  }
}

int SoakRank::run() {
  if (Status s = setup(); !s) {
    fmt::print(stderr, "remora soak: rank setup failed: {}\n", s.to_string());
    return 1;
  }
  model_.assign(static_cast<size_t>(n_), 0);
  const auto start = Clock::now();
  const auto warmup_end = start + std::chrono::duration<double>(o_.seconds / 5);
  const auto end = start + std::chrono::duration<double>(o_.seconds);
  // Rank 0's clock decides, for everyone: [go on, take the baseline now].
  int64_t header[2] = {1, 0};
  int64_t base_fds = -1, base_rss = -1;
  bool baseline_taken = false;
  uint64_t r = 0;
  Status failure = Status::ok();
  for (;; ++r) {
    if (me_ == 0) {
      const auto now = Clock::now();
      header[0] = now < end ? 1 : 0;
      header[1] = !baseline_taken && now >= warmup_end ? 1 : 0;
    }
    failure = comm_->broadcast(header, 2, DataType::kInt64, 0);
    if (!failure) {
      ++c_.errors;
      break;
    }
    if (header[1] != 0) {
      baseline_taken = true;
      base_fds = open_fds();
      base_rss = rss_kib();
    }
    if (header[0] == 0) break;
    failure = round(r);
    if (!failure) break;
    // Nobody starts the next round (and writes into a slot) before everyone checked this one.
    failure = comm_->barrier();
    if (!failure) {
      ++c_.errors;
      break;
    }
  }
  if (!failure) {
    fmt::print(stderr, "remora soak: rank {}: round {}: {} (reproduce with --seed {:#x})\n", me_, r,
               failure.to_string(), o_.seed);
    return 1;  // the other ranks fail on this one's absence; the launcher reports it
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Every endpoint of this rank is still open: the counts compare like with like.
  const int64_t end_fds = open_fds(), end_rss = rss_kib();
  std::vector<int64_t> mine = {base_fds, end_fds, base_rss, end_rss};
  std::vector<int64_t> table(4 * static_cast<size_t>(n_));
  Counters sum;
  std::vector<int64_t> counters(sizeof(Counters) / sizeof(int64_t));
  std::memcpy(counters.data(), &c_, sizeof(Counters));
  if (Status s = comm_->allgather(mine.data(), table.data(), 4, DataType::kInt64); !s) {
    fmt::print(stderr, "remora soak: rank {}: gathering the report: {}\n", me_, s.to_string());
    return 1;
  }
  if (Status s = comm_->allreduce(kInPlace, counters.data(), counters.size(), DataType::kInt64, ReduceOp::kSum); !s) {
    fmt::print(stderr, "remora soak: rank {}: gathering the report: {}\n", me_, s.to_string());
    return 1;
  }
  std::memcpy(static_cast<void*>(&sum), counters.data(), sizeof(Counters));  // int64_t fields only
  bool flat = true;
  for (int i = 0; i < n_; ++i) {
    const int64_t* row = &table[4 * static_cast<size_t>(i)];
    const int64_t slack = std::max<int64_t>(kSoakRssToleranceKib, row[2] / 10);
    if (row[0] < 0 || row[1] != row[0] || row[3] > row[2] + slack) flat = false;
  }
  if (me_ == 0) {
    int64_t ops = 0;
    for (int64_t v : sum.ops) ops += v;
    fmt::print("remora soak: {} ranks, {:.1f} s, {} rounds, seed {:#x}, sizes 0 B to {} B\n", n_, seconds, r, o_.seed,
               o_.max_size);
    fmt::print("  operations {}:", ops);
    for (int k = 0; k < kKinds; ++k) fmt::print(" {} {}{}", kKindNames[k], sum.ops[k], k + 1 < kKinds ? "," : "");
    fmt::print(" (fetch_add {}, compare_swap {})\n", sum.fetch_adds, sum.compare_swaps);
    fmt::print("  bytes verified {} ({:.1f} MiB), errors {}\n", sum.bytes, static_cast<double>(sum.bytes) / (1 << 20),
               sum.errors);
    fmt::print("  rank  fds after warm-up -> end   RSS KiB after warm-up -> end\n");
    for (int i = 0; i < n_; ++i) {
      const int64_t* row = &table[4 * static_cast<size_t>(i)];
      fmt::print("  {:>4}  {:>8} -> {:<8}        {:>10} -> {}\n", i, row[0], row[1], row[2], row[3]);
    }
    fmt::print("  resources {} (descriptors equal, RSS within +{} MiB or +10% after the first fifth of the run)\n",
               flat ? "flat" : "NOT FLAT", kSoakRssToleranceKib >> 10);
    fmt::print("{}\n", sum.errors == 0 && flat ? "soak passed" : "soak FAILED");
  }
  for (auto& ep : out_) {
    if (ep) ep->close();
  }
  return sum.errors == 0 && flat ? 0 : 1;
}

}  // namespace

int run_soak_rank(const SoakOptions& options) { return SoakRank(options).run(); }

}  // namespace remora::tools
