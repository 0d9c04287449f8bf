// test_data.h — deterministic test data shared by the integration tests and the
// peer program: a position-addressable byte generator, message plans for random
// exchanges, and large guarded buffers.
//
// Both processes of a scenario derive everything from the same seed, so each side can
// regenerate what the other one sends without any data travelling out of band.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "remora/types.h"

namespace remora::itest {

/// splitmix64 step: a tiny, good-enough PRNG for choosing sizes and tags.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  /// Uniform in [lo, hi] (inclusive).
  uint64_t uniform(uint64_t lo, uint64_t hi);
  double unit();  ///< [0, 1)

 private:
  uint64_t state_;
};

/// Byte `p` of the stream for `seed` is byte (p % 8) of mix(seed, p / 8): any range can
/// be generated independently of the others (so 4 GiB can be checked block by block).
void fill_stream(uint64_t seed, uint64_t offset, std::span<std::byte> out);

/// The first `len` bytes of the stream for `seed`.
std::vector<std::byte> stream_bytes(uint64_t len, uint64_t seed);

/// XXH3_64bits of the stream for `seed` over [0, length), generated block by block.
uint64_t stream_hash(uint64_t seed, uint64_t length);

/// First offset in [0, data.size()) where `data` differs from the stream for `seed`
/// starting at `offset`, or SIZE_MAX when equal.
size_t first_mismatch(uint64_t seed, uint64_t offset, std::span<const std::byte> data);

/// How the random exchange picks message sizes.
struct PlanOptions {
  uint64_t seed = 1;
  uint32_t direction = 0;     ///< which side sends this plan (0 or 1)
  size_t count = 0;           ///< messages
  size_t max_size = 4 << 20;  ///< largest random size (boundary sizes may exceed it)
  size_t fixed_size = 0;      ///< nonzero: every message has exactly this size
  uint32_t tags = 4;          ///< tags drawn from a set of this many (1..8)
};

/// One message of a plan.
struct MessageSpec {
  uint64_t index = 0;
  Tag tag{};
  size_t size = 0;
  size_t pattern_offset = 0;  ///< content = pattern[pattern_offset, +size)
  size_t recv_slack = 0;      ///< the receiver posts size + slack bytes
};

/// A plan: the messages one side sends, in order, and the pattern their bytes come from.
struct Plan {
  std::vector<MessageSpec> messages;
  std::vector<std::byte> pattern;
  uint64_t total_bytes = 0;

  std::span<const std::byte> content(const MessageSpec& m) const {
    return std::span<const std::byte>(pattern).subspan(m.pattern_offset, m.size);
  }
};

/// The tag set for plans (spans the whole 64-bit range on purpose).
Tag plan_tag(uint32_t i);
Plan make_plan(const PlanOptions& options);

/// Tags reserved for the closing handshake; plans never use them.
inline constexpr Tag kFinTag{0xF1F1F1F1F1F1F101ull};
inline constexpr Tag kFinAckTag{0xF1F1F1F1F1F1F102ull};
inline constexpr Tag kNeverTag{0xF1F1F1F1F1F1F1FFull};

/// Memory from mmap (lazily committed, so 4 GiB costs nothing until touched) placed so
/// that its last byte sits right before a PROT_NONE page: any write past the end
/// faults. The start is deliberately not page aligned.
class GuardedBuffer {
 public:
  GuardedBuffer() = default;
  explicit GuardedBuffer(size_t size);
  ~GuardedBuffer();
  GuardedBuffer(GuardedBuffer&& o) noexcept;
  GuardedBuffer& operator=(GuardedBuffer&& o) noexcept;
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  bool ok() const { return data_ != nullptr || size_ == 0; }
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_, size_}; }

 private:
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

/// MemAvailable from /proc/meminfo in bytes (0 if unknown).
uint64_t mem_available_bytes();

std::string hex64(uint64_t v);

}  // namespace remora::itest
