#include "support/test_data.h"

#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace remora::itest {
namespace {

inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t word_at(uint64_t seed, uint64_t k) { return mix(seed * 0x9E3779B97F4A7C15ull + k); }

}  // namespace

uint64_t Rng::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  return mix(state_);
}

uint64_t Rng::uniform(uint64_t lo, uint64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = hi - lo + 1;
  return span == 0 ? next() : lo + next() % span;
}

double Rng::unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

std::vector<std::byte> stream_bytes(uint64_t len, uint64_t seed) {
  std::vector<std::byte> v(len);
  fill_stream(seed, 0, v);
  return v;
}

void fill_stream(uint64_t seed, uint64_t offset, std::span<std::byte> out) {
  std::byte* p = out.data();
  size_t n = out.size();
  uint64_t pos = offset;
  // Head: up to the next multiple of 8.
  while (n > 0 && (pos & 7) != 0) {
    const uint64_t w = word_at(seed, pos >> 3);
    *p++ = static_cast<std::byte>(w >> (8 * (pos & 7)));
    ++pos;
    --n;
  }
  uint64_t k = pos >> 3;
  while (n >= 8) {
    const uint64_t w = word_at(seed, k++);  // little-endian host: byte i = w >> 8i
    std::memcpy(p, &w, 8);
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    const uint64_t w = word_at(seed, k);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(w >> (8 * i));
  }
}

uint64_t stream_hash(uint64_t seed, uint64_t length) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<std::byte> block(size_t{4} << 20);
  for (uint64_t off = 0; off < length; off += block.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(block.size(), length - off));
    fill_stream(seed, off, std::span(block).first(n));
    XXH3_64bits_update(st, block.data(), n);
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

size_t first_mismatch(uint64_t seed, uint64_t offset, std::span<const std::byte> data) {
  std::vector<std::byte> block(std::min<size_t>(data.size(), size_t{4} << 20));
  for (size_t off = 0; off < data.size(); off += block.size()) {
    const size_t n = std::min(block.size(), data.size() - off);
    fill_stream(seed, offset + off, std::span(block).first(n));
    if (std::memcmp(block.data(), data.data() + off, n) != 0) {
      for (size_t i = 0; i < n; ++i) {
        if (block[i] != data[off + i]) return off + i;
      }
    }
  }
  return SIZE_MAX;
}

Tag plan_tag(uint32_t i) {
  static constexpr uint64_t kTags[8] = {0,          1,          0x7FFFFFFFull,        0x100000000ull,
                                        0xDEADBEEF, 1ull << 63, 0xFFFFFFFFFFFFFFF0ull, 42};
  return Tag{kTags[i % 8]};
}

namespace {

size_t pick_size(Rng& rng, size_t max_size) {
  // 16 KiB: eager limits tests set; 64 KiB: the default eager limit; 512 KiB: the chunk.
  static constexpr size_t kBoundaries[] = {0,
                                           1,
                                           16 * 1024 - 1,
                                           16 * 1024,
                                           16 * 1024 + 1,
                                           64 * 1024 - 1,
                                           64 * 1024,
                                           64 * 1024 + 1,
                                           512 * 1024 - 1,
                                           512 * 1024,
                                           512 * 1024 + 1,
                                           1024 * 1024 + 1};
  const double u = rng.unit();
  if (u < 0.45) return rng.uniform(0, 256);
  if (u < 0.70) return rng.uniform(257, 16 * 1024 - 2);
  if (u < 0.82) {
    const size_t b = kBoundaries[rng.uniform(0, std::size(kBoundaries) - 1)];
    return std::min(b, max_size);
  }
  // Log-uniform from 16 KiB to max_size.
  const double lo = std::log(16.0 * 1024.0);
  const double hi = std::log(static_cast<double>(std::max<size_t>(max_size, 16 * 1024 + 1)));
  const auto s = static_cast<size_t>(std::exp(lo + rng.unit() * (hi - lo)));
  return std::min(std::max<size_t>(s, 16 * 1024), max_size);
}

}  // namespace

Plan make_plan(const PlanOptions& options) {
  Plan plan;
  Rng rng(options.seed * 1000003ull + options.direction + 1);
  const uint32_t tags = std::clamp<uint32_t>(options.tags, 1, 8);
  constexpr size_t kOffsetRange = 1 << 20;
  size_t largest = 0;
  plan.messages.reserve(options.count);
  for (size_t i = 0; i < options.count; ++i) {
    MessageSpec m;
    m.index = i;
    m.tag = plan_tag(static_cast<uint32_t>(rng.uniform(0, tags - 1)));
    m.size = options.fixed_size != 0 ? options.fixed_size : pick_size(rng, options.max_size);
    m.pattern_offset = rng.uniform(0, kOffsetRange - 1);
    const uint64_t s = rng.uniform(0, 9);
    m.recv_slack = s < 6 ? 0 : (s < 9 ? rng.uniform(1, 64) : rng.uniform(65, 70000));
    largest = std::max(largest, m.size);
    plan.total_bytes += m.size;
    plan.messages.push_back(m);
  }
  plan.pattern.resize(largest + kOffsetRange);
  fill_stream(options.seed ^ (0xA5A5A5A5ull << options.direction), 0, plan.pattern);
  return plan;
}

GuardedBuffer::GuardedBuffer(size_t size) : size_(size) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t body = (size + page - 1) / page * page + page;  // at least one page of slop in front
  map_size_ = body + page;
  void* m = mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    map_ = nullptr;
    map_size_ = 0;
    return;
  }
  map_ = m;
  std::byte* guard = static_cast<std::byte*>(m) + body;
  if (mprotect(guard, page, PROT_NONE) != 0) {
    munmap(map_, map_size_);
    map_ = nullptr;
    map_size_ = 0;
    return;
  }
  data_ = guard - size;
}

GuardedBuffer::~GuardedBuffer() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

GuardedBuffer::GuardedBuffer(GuardedBuffer&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

GuardedBuffer& GuardedBuffer::operator=(GuardedBuffer&& o) noexcept {
  if (this != &o) {
    if (map_ != nullptr) munmap(map_, map_size_);
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

uint64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream ss(line.substr(13));
      uint64_t kb = 0;
      ss >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

std::string hex64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace remora::itest
