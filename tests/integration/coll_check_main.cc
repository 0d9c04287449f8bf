// remora_coll_check — one rank of a multi-process collective job, started by whatever
// launcher the test uses (`remora run`, Open MPI's mpirun, `ip netns exec` with
// explicit REMORA_* variables): Communicator::init from the environment, then a
// representative suite of every collective checked bit for bit against the sequential
// reference of tests/coll/reference.h. Every rank computes what it expects from
// deterministic inputs (a function of rank and index); nothing is exchanged to check.
//
//   remora_coll_check                 the suite once; prints "rank R of N: small calls: ALGORITHM"
//                                     (a barrier's), "... small alltoall: ALGORITHM" (8 B a
//                                     block), "rank R of N: large allreduce: ALGORITHM"
//                                     and "... large reduce_scatter|allgather: ALGORITHM" (1 MiB
//                                     each),
//                                     and "rank R of N: K checks ok (launcher L)"
//   remora_coll_check --iterations=I  the suite I times
//   remora_coll_check --loop          a loop of collectives until one fails (or --iterations
//                                     rounds); prints "rank R of N: looping" after the first round
//   remora_coll_check --loop --until-file=PATH   ... or until PATH exists on some rank (each
//                                     round ends with an allreduce of that, so all stop together)
//   remora_coll_check --loop --small  the loop of small barriers and allreduces only, which
//                                     ranks of one host run through their shared segment;
//                                     "looping (barrier: ALGORITHM)" says which path ran
//
// Sizes follow the configuration: counts 0, 1, a prime, around the eager limit
// (REMORA_EAGER_LIMIT) and the pipeline piece (REMORA_COLL_PIPELINE), and above 1 MiB,
// so that eager and rendezvous messages, recursive doubling and the ring all run.
//
// On the first mismatch or failed operation it prints one line saying what, where and
// the Status, and exits at once (the others learn of it through the closed connections
// instead of waiting for a collective this rank will never join):
//   exit 1  a result differs from the reference ("... element E (byte B) of C differs: got .. want ..")
//   exit 2  an operation failed ("... failed with <status code>: <message>")
//   exit 64 bad usage
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_access.h"  // the world communicator's configuration
#include "coll/comm_core.h"    // CollConfig: the pipeline piece the sizes are chosen around
#include "coll/reference.h"  // tests/coll/reference.h
#include "remora/remora.h"

namespace remora::check {
namespace {

using test::pattern;
using test::rank_input;
using test::reference;
using Bytes = std::vector<uint8_t>;

constexpr int kExitMismatch = 1;
constexpr int kExitFailed = 2;
constexpr int kExitUsage = 64;
constexpr size_t kBig = size_t{1} << 20;  ///< ≥ 1 MiB messages: the ring and many chunks
constexpr size_t kPrime = 1009;
constexpr uint8_t kSentinel = 0xEE;

class Checker {
 public:
  Checker(Communicator& world, size_t eager_limit, size_t piece_bytes)
      : world_(world),
        r_(world.rank()),
        n_(world.size()),
        eager_(eager_limit),
        piece_(piece_bytes),
        timeout_(coll::CommAccess::core(world).config().timeout) {}

  uint64_t checks() const { return checks_; }

  void suite() {
    barrier();
    broadcast();
    reduce();
    allreduce();
    reduce_scatter();
    scan();
    gather_scatter();
    gatherv_scatterv();
    allgather();
    allgatherv();
    alltoall();
    alltoallv();
    send_recv();
    asynchronous();
    split();
    barrier();
  }

  /// One round of the dead-rank loop of small calls: what ranks of one host run
  /// through their communicator's shared segment, so that is where they wait.
  void small_loop_round() {
    for (int i = 0; i < 64; ++i) {
      check_allreduce(world_, "small loop", DataType::kFloat32, ReduceOp::kSum, 4, false);
      ok(world_.barrier(), "small loop barrier");
    }
  }

  /// One round of the dead-rank loop: collectives that need every rank, each checked.
  void loop_round(int round) {
    const int root = round % n_;
    check_allreduce(world_, "loop", DataType::kFloat32, ReduceOp::kSum, 2 * piece_ / 4 * uz(n_) + 3, false);
    // The ring's sizes (in two levels where the hosts hold equal groups).
    check_reduce_scatter(DataType::kFloat32, ReduceOp::kSum, 2 * piece_ / 4 + 1, round % 2 == 1);
    allgather_case(DataType::kUint8, 2 * piece_ + 1, round);
    check_broadcast(DataType::kUint8, 100'003, root, salt(round, root));
    alltoall_case(DataType::kBFloat16, kPrime, round);
    ok(world_.barrier(), "loop barrier");
  }

 private:
  static size_t uz(int v) { return static_cast<size_t>(v); }
  /// One less, but not below zero (REMORA_EAGER_LIMIT may be 0).
  static size_t below(size_t v) { return v > 0 ? v - 1 : 0; }
  /// The byte-pattern salt of contributor `who` (a rank, or from * n + to) in case k:
  /// distinct within a case and from the neighbouring cases, so data left over from
  /// the previous case cannot pass for this one's.
  int salt(int k, int who) const { return k * (n_ * n_ + 1) + who + 1; }

  /// Counts for type t: 0, 1, a prime, around the eager limit and the pipeline piece,
  /// and one of at least 1 MiB.
  std::vector<size_t> counts(DataType t) const {
    const size_t es = size_of(t);
    return {0,
            1,
            kPrime,
            below(eager_ / es),
            eager_ / es,
            eager_ / es + 1,
            below(piece_ / es),
            piece_ / es + 1,
            kBig / es + 3};
  }

  [[noreturn]] void die(int code, const std::string& why) const {
    std::printf("rank %d of %d: %s\n", r_, n_, why.c_str());
    std::fflush(stdout);
    std::_Exit(code);
  }
  void ok(const Status& s, const std::string& what) {
    ++checks_;
    if (!s.is_ok()) die(kExitFailed, fmt::format("{} failed with {}: {}", what, to_string(s.code()), s.message()));
  }
  /// got == want, bit for bit; `es` is the element size (for the message).
  void same(const void* got, const void* want, size_t bytes, size_t es, const std::string& what) {
    ++checks_;
    if (bytes == 0 || std::memcmp(got, want, bytes) == 0) return;
    const auto* g = static_cast<const uint8_t*>(got);
    const auto* w = static_cast<const uint8_t*>(want);
    size_t i = 0;
    while (g[i] == w[i]) ++i;
    const size_t first = i / es * es;
    std::string gs, ws;
    for (size_t b = first; b < std::min(bytes, first + es); ++b) {
      gs += fmt::format("{:02x}", g[b]);
      ws += fmt::format("{:02x}", w[b]);
    }
    die(kExitMismatch,
        fmt::format("{}: element {} (byte {}) of {} differs: got {} want {}", what, i / es, i, bytes / es, gs, ws));
  }
  void same(const Bytes& got, const Bytes& want, size_t es, const std::string& what) {
    if (got.size() != want.size()) {
      die(kExitMismatch, fmt::format("{}: {} bytes, want {}", what, got.size(), want.size()));
    }
    same(got.data(), want.data(), got.size(), es, what);
  }
  /// "op type count=N" (v-forms: "base=N", the count their uneven counts derive from).
  static std::string tag(std::string_view op, DataType t, size_t count, std::string_view what = "count") {
    return fmt::format("{} {} {}={}", op, to_string(t), what, count);
  }

  // --- barrier -------------------------------------------------------------------------

  /// Every rank sends a token to every other only after leaving the barrier, so none
  /// of those may have arrived before this rank entered it.
  void barrier() {
    for (int round = 0; round < 3; ++round) {
      const uint32_t user_tag = 100 + static_cast<uint32_t>(round);
      std::vector<uint32_t> got(uz(n_), 0);
      std::vector<Request> rx;
      for (int p = 0; p < n_; ++p) {
        if (p != r_) rx.push_back(world_.irecv(&got[uz(p)], 1, DataType::kUint32, p, Tag{user_tag}));
      }
      for (const Request& q : rx) {
        const Status s = q.test();
        if (s.code() == StatusCode::kInProgress) {
          ++checks_;
          continue;
        }
        ok(s, fmt::format("barrier round {} token recv", round));
        die(kExitMismatch,
            fmt::format("barrier round {}: a token sent after the barrier arrived before this rank entered it", round));
      }
      ok(world_.barrier(), fmt::format("barrier round {}", round));
      for (int p = 0; p < n_; ++p) {
        const auto token = static_cast<uint32_t>(r_ * 1000 + round);
        if (p != r_) ok(world_.send(&token, 1, DataType::kUint32, p, Tag{user_tag}), "barrier token send");
      }
      ok(wait_all(rx, timeout_), "barrier token recv");
      for (int p = 0; p < n_; ++p) {
        const uint32_t want = p == r_ ? 0 : static_cast<uint32_t>(p * 1000 + round);
        same(&got[uz(p)], &want, 4, 4, fmt::format("barrier round {} token from rank {}", round, p));
      }
    }
  }

  // --- broadcast -------------------------------------------------------------------------

  void check_broadcast(DataType t, size_t count, int root, int s) {
    const size_t bytes = count * size_of(t);
    const Bytes want = pattern(s, bytes);
    Bytes buf = r_ == root ? want : Bytes(bytes, kSentinel);
    const std::string what = fmt::format("{} root={}", tag("broadcast", t, count), root);
    ok(world_.broadcast(buf.data(), count, t, root), what);
    same(buf, want, size_of(t), what);
  }

  void broadcast() {
    int k = 0;
    for (DataType t : {DataType::kUint8, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64}) {
      for (size_t count : counts(t)) {
        const int root = k % n_;
        check_broadcast(t, count, root, salt(k++, root));
      }
    }
  }

  // --- reductions ----------------------------------------------------------------------

  void check_reduce(DataType t, ReduceOp op, size_t count, int root, bool in_place) {
    const size_t es = size_of(t);
    const auto mine = rank_input(r_, count, t, op, n_);
    auto in = mine;
    std::vector<std::byte> out(count * es, std::byte{kSentinel});
    const bool ip = in_place && r_ == root;
    if (ip) out = in;
    const std::string what =
        fmt::format("{} {} root={} in_place={}", tag("reduce", t, count), to_string(op), root, in_place);
    ok(world_.reduce(ip ? kInPlace : in.data(), r_ == root ? out.data() : nullptr, count, t, op, root), what);
    if (r_ == root) same(out.data(), reference(0, n_ - 1, 0, count, t, op, n_).data(), out.size(), es, what);
    if (!ip) same(in.data(), mine.data(), in.size(), es, what + ": the send buffer changed");
  }

  void reduce() {
    int k = 0;
    for (DataType t : {DataType::kInt8, DataType::kUint32, DataType::kInt64, DataType::kFloat16, DataType::kBFloat16,
                       DataType::kFloat32, DataType::kFloat64}) {
      for (ReduceOp op : test::kAllOps) {
        if (!test::valid(t, op)) continue;
        for (size_t count : {size_t{0}, size_t{1}, kPrime, piece_ / size_of(t) + 1}) {
          check_reduce(t, op, count, k % n_, k % 3 == 0);
          ++k;
        }
      }
    }
    check_reduce(DataType::kFloat32, ReduceOp::kSum, kBig / 4 + 3, n_ - 1, false);
  }

  void check_allreduce(Communicator& c, std::string_view label, DataType t, ReduceOp op, size_t count, bool in_place) {
    const int n = c.size(), r = c.rank();
    const size_t es = size_of(t);
    const auto mine = rank_input(r, count, t, op, n);
    auto in = mine;
    std::vector<std::byte> out(count * es, std::byte{kSentinel});
    if (in_place) out = in;
    const std::string what =
        fmt::format("{} {} {} in_place={}", label, tag("allreduce", t, count), to_string(op), in_place);
    ok(c.allreduce(in_place ? kInPlace : in.data(), out.data(), count, t, op), what);
    same(out.data(), reference(0, n - 1, 0, count, t, op, n).data(), out.size(), es, what);
    if (!in_place) same(in.data(), mine.data(), in.size(), es, what + ": the send buffer changed");
  }

  void allreduce() {
    int k = 0;
    // Sum over every type at every size; the other operations at sizes on both sides
    // of the ring threshold.
    for (DataType t : test::kAllTypes) {
      for (size_t count : counts(t)) check_allreduce(world_, "world", t, ReduceOp::kSum, count, k++ % 2 == 1);
    }
    for (DataType t : test::kAllTypes) {
      for (ReduceOp op : {ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
        if (!test::valid(t, op)) continue;
        for (size_t count : {size_t{1}, kPrime, piece_ / size_of(t) + 1}) {
          check_allreduce(world_, "world", t, op, count, k++ % 2 == 1);
        }
      }
    }
  }

  void check_reduce_scatter(DataType t, ReduceOp op, size_t count, bool in_place) {
    const size_t es = size_of(t);
    auto in = rank_input(r_, count * uz(n_), t, op, n_);
    std::vector<std::byte> out(count * es, std::byte{kSentinel});
    if (in_place) out = in;  // the input is recv, size*count elements; the result lands at its start
    const std::string what = fmt::format("{} {} in_place={}", tag("reduce_scatter", t, count), to_string(op), in_place);
    ok(world_.reduce_scatter(in_place ? kInPlace : in.data(), out.data(), count, t, op), what);
    same(out.data(), reference(0, n_ - 1, count * uz(r_), count, t, op, n_).data(), count * es, es, what);
  }

  void reduce_scatter() {
    int k = 0;
    for (DataType t : {DataType::kUint8, DataType::kInt32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                       DataType::kFloat64}) {
      for (ReduceOp op : test::kAllOps) {
        if (!test::valid(t, op)) continue;
        for (size_t count : {size_t{0}, size_t{1}, kPrime, piece_ / size_of(t) + 1}) {
          check_reduce_scatter(t, op, count, k++ % 2 == 1);
        }
      }
    }
    check_reduce_scatter(DataType::kBFloat16, ReduceOp::kSum, kBig / 2 / uz(n_) + 5, false);
  }

  void scan() {
    int k = 0;
    for (DataType t : test::kAllTypes) {
      const size_t es = size_of(t);
      for (ReduceOp op : test::kAllOps) {
        if (!test::valid(t, op)) continue;
        if (op == ReduceOp::kAvg) {
          // A prefix has no one divisor: refused before anything is sent, and the
          // communicator stays usable (the next case proves it).
          std::vector<std::byte> buf(8 * es);
          for (bool exclusive : {false, true}) {
            ++checks_;
            const Status s =
                exclusive ? world_.exscan(kInPlace, buf.data(), 8, t, op) : world_.scan(kInPlace, buf.data(), 8, t, op);
            if (s.code() != StatusCode::kInvalidArgument) {
              die(kExitMismatch, fmt::format("{} {} avg: {} where invalid_argument was expected",
                                             exclusive ? "exscan" : "scan", to_string(t), s.to_string()));
            }
          }
          continue;
        }
        for (size_t count : {size_t{0}, size_t{1}, kPrime, piece_ / es + 1}) {
          for (bool exclusive : {false, true}) {
            const bool in_place = k++ % 3 == 1;
            const auto mine = rank_input(r_, count, t, op, n_);
            std::vector<std::byte> out = in_place ? mine : std::vector<std::byte>(count * es, std::byte{kSentinel});
            const std::vector<std::byte> before = out;
            const void* send = in_place ? kInPlace : mine.data();
            const std::string what =
                fmt::format("{} {} in_place={}", tag(exclusive ? "exscan" : "scan", t, count), to_string(op), in_place);
            ok(exclusive ? world_.exscan(send, out.data(), count, t, op) : world_.scan(send, out.data(), count, t, op),
               what);
            if (exclusive && r_ == 0) {
              same(out.data(), before.data(), out.size(), es, what + ": rank 0's recv was touched");
            } else {
              same(out.data(), reference(0, exclusive ? r_ - 1 : r_, 0, count, t, op, n_).data(), out.size(), es, what);
            }
          }
        }
      }
    }
  }

  // --- gather / scatter -------------------------------------------------------------------

  /// Counts for the rooted and all- data movements: every rank's block, so the largest
  /// one is split over the ranks and the root's buffer still holds ≥ 1 MiB.
  std::vector<size_t> block_counts(DataType t) const {
    const size_t es = size_of(t);
    return {0, 1, kPrime, below(eager_ / es), eager_ / es + 1, piece_ / es + 1, kBig / uz(n_) / es + 1};
  }

  /// The concatenation of every rank's block, each block `block` bytes of pattern(salt(k, p)).
  Bytes concatenated(int k, size_t block) const {
    Bytes all;
    all.reserve(block * uz(n_));
    for (int p = 0; p < n_; ++p) {
      const Bytes b = pattern(salt(k, p), block);
      all.insert(all.end(), b.begin(), b.end());
    }
    return all;
  }

  void gather_scatter() {
    int k = 0;
    for (DataType t : {DataType::kUint8, DataType::kFloat16, DataType::kBFloat16, DataType::kInt64}) {
      const size_t es = size_of(t);
      for (size_t count : block_counts(t)) {
        const int root = k % n_;
        const bool in_place = k % 2 == 1;
        const bool ip = in_place && r_ == root;
        const size_t block = count * es;
        const size_t at = uz(r_) * block;
        const Bytes want = concatenated(k, block);
        const Bytes mine = pattern(salt(k, r_), block);
        const std::string where = fmt::format("count={} {} root={} in_place={}", count, to_string(t), root, in_place);

        Bytes all(r_ == root ? want.size() : 0, kSentinel);
        if (ip) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(at));
        ok(world_.gather(ip ? kInPlace : mine.data(), all.data(), count, t, root), "gather " + where);
        if (r_ == root) same(all, want, es, "gather " + where);

        // scatter: rank p gets block p of the root's buffer; in place, the root's
        // block stays where it is and the buffer is left alone.
        const Bytes src = r_ == root ? want : Bytes{};
        Bytes got(block, kSentinel);
        ok(world_.scatter(src.data(), ip ? kInPlace : got.data(), count, t, root), "scatter " + where);
        if (r_ == root) same(src, want, es, "scatter " + where + ": the root's send buffer changed");
        if (!ip) same(got, mine, es, "scatter " + where);
        ++k;
      }
    }
  }

  /// v-form geometry for base count `base`: uneven counts with zeros, and
  /// displacements in reverse rank order with gaps; `shift` varies who gets zero.
  struct Layout {
    std::vector<size_t> counts, displs;
    size_t total = 0;  ///< elements the layout spans
  };
  Layout layout(size_t base, int shift) const {
    Layout l;
    for (int p = 0; p < n_; ++p) l.counts.push_back(test::uneven(base, p + shift));
    l.total = test::scattered_layout(l.counts, &l.displs);
    return l;
  }
  /// What a v-form's gathered buffer holds: each rank's pattern at its displacement,
  /// the sentinel in the gaps.
  Bytes placed(int k, const Layout& l, size_t es) const {
    Bytes want(l.total * es, kSentinel);
    for (int p = 0; p < n_; ++p) {
      const Bytes b = pattern(salt(k, p), l.counts[uz(p)] * es);
      std::copy(b.begin(), b.end(), want.begin() + static_cast<ptrdiff_t>(l.displs[uz(p)] * es));
    }
    return want;
  }

  void gatherv_scatterv() {
    int k = 0;
    for (DataType t : {DataType::kUint8, DataType::kBFloat16, DataType::kFloat64}) {
      const size_t es = size_of(t);
      for (size_t base : {size_t{0}, size_t{1}, kPrime, eager_ / es, piece_ / es}) {
        const int root = k % n_;
        const bool in_place = k % 2 == 0;
        const bool ip = in_place && r_ == root;
        const Layout l = layout(base, k);
        const Bytes want = placed(k, l, es);
        const size_t my_count = l.counts[uz(r_)];
        const Bytes mine = pattern(salt(k, r_), my_count * es);
        const std::string where = fmt::format("base={} {} root={} in_place={}", base, to_string(t), root, in_place);
        // Only the root's count arrays matter: the others pass empty spans.
        const std::span<const size_t> rc = r_ == root ? std::span<const size_t>(l.counts) : std::span<const size_t>();
        const std::span<const size_t> rd = r_ == root ? std::span<const size_t>(l.displs) : std::span<const size_t>();

        Bytes all(r_ == root ? want.size() : 0, kSentinel);
        if (ip) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(l.displs[uz(r_)] * es));
        ok(world_.gatherv(ip ? kInPlace : mine.data(), my_count, all.data(), rc, rd, t, root), "gatherv " + where);
        if (r_ == root) same(all, want, es, "gatherv " + where);

        const Bytes src = r_ == root ? want : Bytes{};
        Bytes got(my_count * es, kSentinel);
        ok(world_.scatterv(src.data(), rc, rd, ip ? kInPlace : got.data(), my_count, t, root), "scatterv " + where);
        if (r_ == root) same(src, want, es, "scatterv " + where + ": the root's send buffer changed");
        if (!ip) same(got, mine, es, "scatterv " + where);
        ++k;
      }
    }
  }

  void allgather() {
    int k = 0;
    for (DataType t : {DataType::kUint8, DataType::kFloat16, DataType::kFloat64}) {
      for (size_t count : block_counts(t)) {
        allgather_case(t, count, k);
        ++k;
      }
    }
  }

  /// An allgather of `count` elements a rank, case k (in place when k is even), checked.
  void allgather_case(DataType t, size_t count, int k) {
    const size_t es = size_of(t);
    const bool in_place = k % 2 == 0;
    const size_t block = count * es;
    const Bytes want = concatenated(k, block);
    const Bytes mine = pattern(salt(k, r_), block);
    Bytes all(want.size(), kSentinel);
    if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(uz(r_) * block));
    const std::string what = fmt::format("{} in_place={}", tag("allgather", t, count), in_place);
    ok(world_.allgather(in_place ? kInPlace : mine.data(), all.data(), count, t), what);
    same(all, want, es, what);
  }

  void allgatherv() {
    int k = 0;
    for (DataType t : {DataType::kUint8, DataType::kBFloat16, DataType::kInt32}) {
      const size_t es = size_of(t);
      for (size_t base : {size_t{0}, size_t{1}, kPrime, eager_ / es, piece_ / es / uz(n_) + 1}) {
        const bool in_place = k % 2 == 1;
        const Layout l = layout(base, k + 1);
        const Bytes want = placed(k, l, es);
        const size_t my_count = l.counts[uz(r_)];
        const Bytes mine = pattern(salt(k, r_), my_count * es);
        Bytes all(want.size(), kSentinel);
        if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(l.displs[uz(r_)] * es));
        const std::string what = fmt::format("{} in_place={}", tag("allgatherv", t, base, "base"), in_place);
        ok(world_.allgatherv(in_place ? kInPlace : mine.data(), my_count, all.data(), l.counts, l.displs, t), what);
        same(all, want, es, what);
        ++k;
      }
    }
  }

  // --- alltoall ---------------------------------------------------------------------------

  /// What rank `from` sends rank `to` in case k: distinct per (k, from, to).
  Bytes block_of(int k, int from, int to, size_t bytes) const { return pattern(salt(k, from * n_ + to), bytes); }

  void alltoall_case(DataType t, size_t count, int k) {
    const size_t es = size_of(t);
    const size_t block = count * es;
    Bytes send, want;
    for (int p = 0; p < n_; ++p) {
      const Bytes out = block_of(k, r_, p, block), in = block_of(k, p, r_, block);
      send.insert(send.end(), out.begin(), out.end());
      want.insert(want.end(), in.begin(), in.end());
    }
    Bytes got(want.size(), kSentinel);
    const std::string what = tag("alltoall", t, count);
    ok(world_.alltoall(send.data(), got.data(), count, t), what);
    same(got, want, es, what);
  }

  void alltoall() {
    int k = 0;
    for (DataType t : {DataType::kUint8, DataType::kBFloat16, DataType::kFloat64}) {
      const size_t es = size_of(t);
      for (size_t count : {size_t{0}, size_t{1}, kPrime, eager_ / es + 1, piece_ / es + 1})
        alltoall_case(t, count, k++);
    }
    alltoall_case(DataType::kFloat32, kBig / 4 / uz(n_) + 1, k);
  }

  void alltoallv() {
    int k = 0;
    for (DataType t : {DataType::kUint8, DataType::kFloat16, DataType::kUint64}) {
      const size_t es = size_of(t);
      for (size_t base : {size_t{0}, size_t{1}, kPrime, eager_ / es, piece_ / es}) {
        // Rank a sends count(a, b) elements to b: uneven, and zero for some pairs.
        auto count = [&](int a, int b) -> size_t {
          return base == 0 || (a + 2 * b + k) % 4 == 0 ? 0 : base + uz(a) * 2 + uz(b);
        };
        std::vector<size_t> scounts, rcounts, sdispls, rdispls;
        for (int p = 0; p < n_; ++p) {
          scounts.push_back(count(r_, p));
          rcounts.push_back(count(p, r_));
        }
        const size_t stotal = test::scattered_layout(scounts, &sdispls);
        const size_t rtotal = test::scattered_layout(rcounts, &rdispls) + 7;
        Bytes send(stotal * es, kSentinel), want(rtotal * es, kSentinel), got(rtotal * es, kSentinel);
        for (int p = 0; p < n_; ++p) {
          const Bytes out = block_of(k, r_, p, scounts[uz(p)] * es), in = block_of(k, p, r_, rcounts[uz(p)] * es);
          std::copy(out.begin(), out.end(), send.begin() + static_cast<ptrdiff_t>(sdispls[uz(p)] * es));
          std::copy(in.begin(), in.end(), want.begin() + static_cast<ptrdiff_t>(rdispls[uz(p)] * es));
        }
        const std::string what = tag("alltoallv", t, base, "base");
        ok(world_.alltoallv(send.data(), scounts, sdispls, got.data(), rcounts, rdispls, t), what);
        same(got, want, es, what);
        ++k;
      }
    }
  }

  // --- point to point ---------------------------------------------------------------------

  /// Every rank sends to the rank d above it and receives from the one d below, for
  /// every distance d: half the sizes through irecv + send, half through isend + recv.
  void send_recv() {
    int k = 0;
    for (int d = 1; d < n_; ++d) {
      const int to = (r_ + d) % n_, from = (r_ + n_ - d) % n_;
      for (size_t bytes : {size_t{0}, size_t{1}, kPrime, below(eager_), eager_, eager_ + 1, kBig + 3}) {
        const uint32_t user_tag = 200 + static_cast<uint32_t>(k % 7);
        const Bytes out = block_of(k, r_, to, bytes), want = block_of(k, from, r_, bytes);
        Bytes in(bytes, kSentinel);
        const std::string what = fmt::format("send/recv {} bytes to {} from {} tag {}", bytes, to, from, user_tag);
        if (k % 2 == 0) {
          Request rx = world_.irecv(in.data(), bytes, DataType::kUint8, from, Tag{user_tag});
          ok(world_.send(out.data(), bytes, DataType::kUint8, to, Tag{user_tag}), what + " (send)");
          ok(rx.wait(timeout_), what + " (irecv)");
        } else {
          Request tx = world_.isend(out.data(), bytes, DataType::kUint8, to, Tag{user_tag});
          ok(world_.recv(in.data(), bytes, DataType::kUint8, from, Tag{user_tag}), what + " (recv)");
          ok(tx.wait(timeout_), what + " (isend)");
        }
        same(in, want, 1, what);
        ++k;
      }
    }
  }

  /// Asynchronous forms posted together run in order on the worker thread.
  void asynchronous() {
    const int root = n_ - 1;
    const size_t count = piece_ / 2 + 3;  // fp16: more than one piece
    const Bytes bwant = pattern(salt(0, root), count * 2);
    Bytes b = r_ == root ? bwant : Bytes(count * 2, kSentinel);
    const auto in = rank_input(r_, count, DataType::kFloat16, ReduceOp::kMax, n_);
    std::vector<std::byte> out(in.size());
    const Bytes mine = pattern(salt(1, r_), kPrime);
    Bytes all(kPrime * uz(n_), kSentinel);
    std::vector<Request> reqs{world_.ibroadcast(b.data(), count, DataType::kFloat16, root), world_.ibarrier(),
                              world_.iallreduce(in.data(), out.data(), count, DataType::kFloat16, ReduceOp::kMax),
                              world_.iallgather(mine.data(), all.data(), kPrime, DataType::kUint8)};
    ok(wait_all(reqs, timeout_), "ibroadcast + ibarrier + iallreduce + iallgather");
    same(b, bwant, 2, "ibroadcast");
    same(out.data(), reference(0, n_ - 1, 0, count, DataType::kFloat16, ReduceOp::kMax, n_).data(), out.size(), 2,
         "iallreduce float16 max");
    same(all, concatenated(1, kPrime), 1, "iallgather");
  }

  // --- split -----------------------------------------------------------------------------

  /// Colour by parity (the last rank of three or more opts out), key reversing the
  /// order; the sub-communicator's ranks, an allgather of world ranks, an allreduce
  /// and a broadcast on it; then a split of the sub-communicator into one piece.
  void split() {
    const int colour = n_ > 2 && r_ == n_ - 1 ? Communicator::kUndefined : r_ % 2;
    auto sub = world_.split(colour, n_ - r_);
    ok(sub.status(), fmt::format("split colour={} key={}", colour, n_ - r_));
    ++checks_;
    if (colour == Communicator::kUndefined) {
      if (*sub != nullptr) die(kExitMismatch, "split with kUndefined returned a communicator");
      return;
    }
    // Members: the ranks of my colour, by key (n - rank) ascending, so highest rank first.
    std::vector<int32_t> members;
    for (int p = n_ - 1; p >= 0; --p) {
      if (p % 2 == colour && !(n_ > 2 && p == n_ - 1)) members.push_back(p);
    }
    Communicator& c = **sub;
    const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), r_) - members.begin());
    if (c.size() != static_cast<int>(members.size()) || c.rank() != want_rank) {
      die(kExitMismatch, fmt::format("split colour {}: rank {} of {}, want rank {} of {}", colour, c.rank(), c.size(),
                                     want_rank, members.size()));
    }
    const std::string label = fmt::format("split colour {}", colour);
    std::vector<int32_t> ranks(members.size(), -1);
    const int32_t me = r_;
    ok(c.allgather(&me, ranks.data(), 1, DataType::kInt32), label + " allgather");
    same(ranks.data(), members.data(), ranks.size() * 4, 4, label + " allgather of world ranks");
    check_allreduce(c, label, DataType::kInt64, ReduceOp::kSum, kPrime, false);
    check_allreduce(c, label, DataType::kBFloat16, ReduceOp::kMin, piece_ / 2 + 1, true);
    const int root = c.size() - 1;
    const Bytes want = pattern(salt(2, root), kPrime);
    Bytes buf = c.rank() == root ? want : Bytes(kPrime, kSentinel);
    ok(c.broadcast(buf.data(), kPrime, DataType::kUint8, root), label + " broadcast");
    same(buf, want, 1, label + " broadcast");

    // One colour, equal keys: the order of the parent is kept.
    auto again = c.split(0, 0);
    ok(again.status(), label + " split again");
    ++checks_;
    if (*again == nullptr || (*again)->rank() != c.rank() || (*again)->size() != c.size()) {
      die(kExitMismatch, label + ": splitting into one colour with equal keys changed the ranks");
    }
    check_allreduce(**again, label + " resplit", DataType::kFloat64, ReduceOp::kProd, kPrime, false);
  }

  Communicator& world_;
  const int r_, n_;
  const size_t eager_, piece_;
  const Duration timeout_;
  uint64_t checks_ = 0;
};

int usage(const char* why) {
  std::fprintf(stderr, "remora_coll_check: %s\nusage: remora_coll_check [--iterations=N] [--loop [--small]]\n", why);
  return kExitUsage;
}

int run(int argc, char** argv) {
  bool loop = false, small = false;
  long iterations = -1;
  std::string until_file;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--loop") {
      loop = true;
    } else if (a == "--small") {
      small = true;
    } else if (a.starts_with("--until-file=")) {
      until_file = std::string(a.substr(std::strlen("--until-file=")));
    } else if (a.starts_with("--iterations=")) {
      char* end = nullptr;
      iterations = std::strtol(argv[i] + std::strlen("--iterations="), &end, 10);
      if (*end != '\0' || iterations < 1) return usage("--iterations wants a number above 0");
    } else {
      return usage(("unknown argument " + std::string(a)).c_str());
    }
  }

  // The launcher's view first, so a failing init can still say which rank it was.
  auto launch = detect_launch();
  if (!launch) {
    std::printf("rank ?: %s\n", launch.status().to_string().c_str());
    return kExitFailed;
  }
  const int rank = launch->rank, size = launch->size;
  auto fail = [&](const char* what, const Status& s) {
    std::printf("rank %d of %d: %s failed with %s: %s\n", rank, size, what, std::string(to_string(s.code())).c_str(),
                s.message().c_str());
    std::fflush(stdout);
    return kExitFailed;
  };
  auto ctx = Context::create();
  if (!ctx) return fail("Context::create", ctx.status());
  auto comm = Communicator::init(**ctx, *launch);
  if (!comm) return fail("Communicator::init", comm.status());

  Checker check(**comm, (*ctx)->config().eager_limit, coll::CommAccess::core(**comm).config().pipeline_bytes);
  if (loop) {
    for (int round = 0; iterations < 0 || round < iterations; ++round) {
      if (small) {
        check.small_loop_round();
      } else {
        check.loop_round(round);
      }
      if (round == 0 && small) {
        // Which path the small calls take (the test wants the shared segment's).
        const std::string_view path = (*comm)->algorithm(CollectiveKind::kBarrier, 0).name;
        std::printf("rank %d of %d: looping (barrier: %.*s)\n", rank, size, static_cast<int>(path.size()), path.data());
        std::fflush(stdout);
      } else if (round == 0) {
        std::printf("rank %d of %d: looping\n", rank, size);
        std::fflush(stdout);
      }
      if (!until_file.empty()) {
        std::error_code ec;
        int32_t mine = std::filesystem::exists(until_file, ec) ? 1 : 0, any = 0;
        if (Status s = (*comm)->allreduce(&mine, &any, 1, DataType::kInt32, ReduceOp::kMax); !s) {
          return fail("the loop's stop allreduce", s);
        }
        if (any != 0) break;
      }
    }
  } else {
    for (long i = 0; i < std::max(iterations, 1L); ++i) check.suite();
    // Which path small calls took (ranks of one host: their shared segment).
    const std::string_view path = (*comm)->algorithm(CollectiveKind::kBarrier, 0).name;
    std::printf("rank %d of %d: small calls: %.*s\n", rank, size, static_cast<int>(path.size()), path.data());
    // And a small alltoall's (8 bytes a block; an earlier call set the segments up).
    const std::string_view a2a = (*comm)->algorithm(CollectiveKind::kAlltoall, 8).name;
    std::printf("rank %d of %d: small alltoall: %.*s\n", rank, size, static_cast<int>(a2a.size()), a2a.data());
    // And a 1 MiB allreduce (ranks in groups of several hosts that allow lanes: two levels).
    const std::string_view large = (*comm)->algorithm(CollectiveKind::kAllreduce, kBig).name;
    std::printf("rank %d of %d: large allreduce: %.*s\n", rank, size, static_cast<int>(large.size()), large.data());
    // And a reduce_scatter of 1 MiB of input and an allgather of 1 MiB of result (likewise).
    const std::pair<const char*, CollectiveKind> kinds[] = {{"reduce_scatter", CollectiveKind::kReduceScatter},
                                                            {"allgather", CollectiveKind::kAllgather}};
    for (const auto& [what, kind] : kinds) {
      const std::string_view name = (*comm)->algorithm(kind, kBig / static_cast<size_t>(size)).name;
      std::printf("rank %d of %d: large %s: %.*s\n", rank, size, what, static_cast<int>(name.size()), name.data());
    }
  }
  // Tear down before reporting success: a shutdown that fails or hangs is a failure too.
  comm->reset();
  ctx->reset();
  std::printf("rank %d of %d: %llu checks ok (launcher %s)\n", rank, size,
              static_cast<unsigned long long>(check.checks()), launch->launcher.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace remora::check

int main(int argc, char** argv) { return remora::check::run(argc, argv); }
