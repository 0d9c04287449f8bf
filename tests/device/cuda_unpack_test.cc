// Tests for the scatter ("unpack") of device memory: the layout the kernel and the host
// share, the fatbin embedded in the library (when the build had nvcc: the same bytes
// nvcc wrote, a well-formed fatbin with machine code for each configured architecture
// and PTX), and, with a GPU, CudaDomain::scatter on both paths (kernel and one copy per
// entry) against a host reference, with many entries at unaligned offsets and lengths.
#include "device/cuda_unpack.h"

#include <cstddef>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <utility>

#include "device/cuda_domain.h"
#include "device/cuda_test_util.h"

namespace remora::device {
namespace {

using testing::compare_bytes;
using testing::CudaGpuTest;
using testing::DeviceBuffer;
using testing::kCopyTimeout;
using testing::pattern;

static_assert(offsetof(UnpackEntry, src_offset) == 0);
static_assert(offsetof(UnpackEntry, length) == 8);
static_assert(offsetof(UnpackEntry, reserved) == 12);
static_assert(offsetof(UnpackEntry, dst_offset) == 16);
static_assert(offsetof(UnpackBatch, entries) == 24);

#ifdef REMORA_TEST_UNPACK_FATBIN

uint32_t read_u32(std::span<const unsigned char> bytes, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}
uint64_t read_u64(std::span<const unsigned char> bytes, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, bytes.data() + at, 8);
  return v;
}

TEST(UnpackFatbin, IsWhatNvccWrote) {
  const std::span<const unsigned char> embedded = unpack_fatbin();
  ASSERT_FALSE(embedded.empty()) << "CMake built the kernel, but the library holds no fatbin";
  std::ifstream file(REMORA_TEST_UNPACK_FATBIN, std::ios::binary);
  ASSERT_TRUE(file) << REMORA_TEST_UNPACK_FATBIN;
  const std::vector<unsigned char> written((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_EQ(embedded.size(), written.size());
  EXPECT_TRUE(std::equal(embedded.begin(), embedded.end(), written.begin()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(embedded.data()) % 16, 0u) << "cuModuleLoadData wants an aligned image";
}

TEST(UnpackFatbin, HoldsCodeForEachArchitectureAndPtx) {
  const std::span<const unsigned char> fatbin = unpack_fatbin();
  ASSERT_GE(fatbin.size(), 16u);
  // The fatbin header: magic, version, header size, size of what follows.
  EXPECT_EQ(read_u32(fatbin, 0), 0xBA55ED50u) << "fatbin magic";
  const size_t header = fatbin[6] | (fatbin[7] << 8);
  ASSERT_EQ(header, 16u);
  ASSERT_EQ(read_u64(fatbin, 8) + header, fatbin.size());
  // Its entries, as nvcc 13.0 writes them (the layout is NVIDIA's and undocumented:
  // kind 1 = PTX, 2 = ELF; entry header size; payload size; the sm number at 28).
  std::set<std::pair<int, uint32_t>> found;
  size_t at = header;
  while (at < fatbin.size()) {
    ASSERT_LE(at + 32, fatbin.size());
    const int kind = fatbin[at] | (fatbin[at + 1] << 8);
    const uint32_t entry_header = read_u32(fatbin, at + 4);
    const uint64_t payload = read_u64(fatbin, at + 8);
    found.emplace(kind, read_u32(fatbin, at + 28));
    ASSERT_LE(at + entry_header + payload, fatbin.size());
    at += entry_header + payload;
  }
  EXPECT_EQ(at, fatbin.size());
  std::set<std::pair<int, uint32_t>> expected;
  std::stringstream archs(REMORA_TEST_CUDA_ARCHITECTURES);
  uint32_t last = 0;
  for (std::string arch; std::getline(archs, arch, ',');) {
    last = static_cast<uint32_t>(std::stoul(arch));
    expected.emplace(2, last);
  }
  expected.emplace(1, last);
  EXPECT_EQ(found, expected);
}

#else

TEST(UnpackFatbin, AbsentWithoutAToolkit) {
  EXPECT_TRUE(unpack_fatbin().empty());
  const CudaDriver nothing_resolved;
  auto kernel = UnpackKernel::load(nothing_resolved);  // must refuse before calling the driver
  EXPECT_EQ(kernel.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(kernel.status().message().find("not built"), std::string::npos) << kernel.status().to_string();
}

#endif

// ---------------------------------------------------------------------------------
// With a GPU
// ---------------------------------------------------------------------------------

/// Parameter: use the unpack kernel (true) or one copy per entry (false).
class CudaScatterGpu : public CudaGpuTest, public ::testing::WithParamInterface<bool> {
 protected:
  /// Many entries at unaligned offsets and lengths (some empty, some large, some
  /// 16-byte aligned), destinations disjoint with gaps, sources anywhere (they may
  /// overlap each other), filling most of `dst_bytes`.
  static std::vector<UnpackEntry> make_entries(size_t count, uint64_t src_bytes, uint64_t dst_bytes, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<UnpackEntry> entries;
    uint64_t dst = rng() % 13;
    for (size_t i = 0; i < count; ++i) {
      uint32_t length = 0;
      switch (i % 6) {
        case 0: length = static_cast<uint32_t>(1 + rng() % 64); break;
        case 1: length = static_cast<uint32_t>(1 + rng() % 9000); break;
        case 2: length = 4096; break;
        case 3: length = static_cast<uint32_t>(16 * (1 + rng() % 512)); break;
        case 4: length = i % 12 == 4 ? 0 : static_cast<uint32_t>(1 + rng() % 3); break;
        default: length = static_cast<uint32_t>(20000 + rng() % 50000); break;
      }
      if (dst + length > dst_bytes) break;
      uint64_t src = rng() % (src_bytes - length + 1);
      if (i % 6 == 3) src &= ~uint64_t{15};  // some share the destination's alignment
      if (i % 6 == 3) dst = (dst + 15) & ~uint64_t{15};
      if (dst + length > dst_bytes) break;
      entries.push_back(UnpackEntry{.src_offset = src, .length = length, .reserved = 0, .dst_offset = dst});
      dst += length + rng() % 40;
    }
    return entries;
  }
};

TEST_P(CudaScatterGpu, MatchesTheHostReference) {
  const bool use_kernel = GetParam();
  CudaDomain domain(driver_, CudaDomainOptions{.use_unpack_kernel = use_kernel});
  constexpr size_t kSrcBytes = 8 << 20;
  constexpr size_t kDstBytes = 16 << 20;
  DeviceBuffer src(*driver_, kSrcBytes);
  DeviceBuffer dst(*driver_, kDstBytes);
  ASSERT_TRUE(src.ok() && dst.ok()) << src.error() << " " << dst.error();
  const std::vector<std::byte> src_bytes = pattern(kSrcBytes, 2024);
  src.write(src_bytes);
  dst.fill(0xEE);

  const Status kernel = domain.unpack_kernel_status(dst.data());
  if (!use_kernel) {
    EXPECT_EQ(kernel.code(), StatusCode::kUnsupported);
  } else if (unpack_fatbin().empty()) {
    EXPECT_EQ(kernel.code(), StatusCode::kUnsupported);
  } else {
#ifdef REMORA_TEST_CUDA_TOOLKIT_VERSION
    // Machine code for sm_80 and up, from a toolkit the driver is at least as new as.
    if (device_attribute(cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) >= 8 &&
        driver_->version >= REMORA_TEST_CUDA_TOOLKIT_VERSION) {
      EXPECT_TRUE(kernel.is_ok()) << "the kernel was built for this GPU but does not load: " << kernel.to_string();
    }
#endif
    std::printf("unpack kernel on this GPU: %s\n", kernel.is_ok() ? "loaded" : kernel.to_string().c_str());
  }

  // Bases at odd addresses inside the allocations, so every alignment case occurs.
  constexpr size_t kSrcBase = 3;
  constexpr size_t kDstBase = 5;
  const std::vector<UnpackEntry> entries =
      make_entries(3 * kUnpackEntriesPerLaunch + 17, kSrcBytes - kSrcBase, kDstBytes - kDstBase, 7);
  ASSERT_GT(entries.size(), 2 * kUnpackEntriesPerLaunch) << "enough entries for several launches";

  std::vector<std::byte> expected(kDstBytes, std::byte{0xEE});
  for (const UnpackEntry& e : entries) {
    std::memcpy(expected.data() + kDstBase + e.dst_offset, src_bytes.data() + kSrcBase + e.src_offset, e.length);
  }
  auto copy = domain.scatter(dst.data() + kDstBase, src.data() + kSrcBase, entries);
  ASSERT_TRUE(copy.is_ok()) << copy.status().to_string();
  Status s = (*copy)->wait(kCopyTimeout);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const std::vector<std::byte> got = dst.read();
  EXPECT_EQ(compare_bytes(expected.data(), got.data(), kDstBytes), "");
}

TEST_P(CudaScatterGpu, RefusesBadEntriesAndCopiesNothing) {
  CudaDomain domain(driver_, CudaDomainOptions{.use_unpack_kernel = GetParam()});
  DeviceBuffer src(*driver_, 1 << 20);
  DeviceBuffer dst(*driver_, 1 << 20);
  ASSERT_TRUE(src.ok() && dst.ok());
  src.fill(0x11);
  dst.fill(0x22);
  const UnpackEntry good{.src_offset = 0, .length = 100, .reserved = 0, .dst_offset = 0};

  const UnpackEntry past_dst{.src_offset = 0, .length = 100, .reserved = 0, .dst_offset = (1 << 20) - 99};
  auto r = domain.scatter(dst.data(), src.data(), std::vector<UnpackEntry>{good, past_dst});
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("entry 1"), std::string::npos) << r.status().to_string();

  const UnpackEntry past_src{.src_offset = UINT64_MAX - 10, .length = 100, .reserved = 0, .dst_offset = 0};
  r = domain.scatter(dst.data(), src.data(), std::vector<UnpackEntry>{good, good, past_src});
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << "offsets that overflow are out of range";

  // The room counts from the base, not from the allocation's start.
  const UnpackEntry fits_from_start{.src_offset = 0, .length = 4096, .reserved = 0, .dst_offset = (1 << 20) - 4096};
  r = domain.scatter(dst.data() + 1, src.data(), std::span(&fits_from_start, 1));
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);

  const UnpackEntry reserved{.src_offset = 0, .length = 1, .reserved = 1, .dst_offset = 0};
  EXPECT_EQ(domain.scatter(dst.data(), src.data(), std::span(&reserved, 1)).status().code(),
            StatusCode::kInvalidArgument);

  std::vector<std::byte> host(1 << 20);
  EXPECT_EQ(domain.scatter(host.data(), src.data(), std::span(&good, 1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(domain.scatter(dst.data(), host.data(), std::span(&good, 1)).status().code(), StatusCode::kInvalidArgument);

  const std::vector<std::byte> untouched(1 << 20, std::byte{0x22});
  const std::vector<std::byte> got = dst.read();
  EXPECT_EQ(compare_bytes(untouched.data(), got.data(), got.size()), "") << "a refused scatter wrote";

  auto empty = domain.scatter(dst.data(), src.data(), std::span<const UnpackEntry>{});
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE((*empty)->test().is_ok());
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaScatterGpu, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "Kernel" : "CopyPerEntry";
                         });

}  // namespace
}  // namespace remora::device
