// CUDA device memory through the endpoint's staging path: two contexts in this process,
// connected over loopback, each with the process's CUDA domain added
// (Context::add_memory_domain), send messages of every size class around the eager
// limit and the chunk size, and one of 24 MiB, device to device, host to device and
// device to host. Every message is read back with the driver's own copy and compared
// byte for byte (checksums in the failure message), the bytes after it must be
// untouched, and both endpoints must report the transfers as staged. Needs a GPU (runs
// under the emulated driver in CI; that is not a GPU result).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "device/cuda_test_util.h"
#include "remora/remora.h"

namespace remora::device {
namespace {

using namespace std::chrono_literals;
using testing::compare_bytes;
using testing::CudaGpuTest;
using testing::DeviceBuffer;
using testing::pattern;

class CudaStaging : public CudaGpuTest {};

enum class Where { kHost, kDevice };

/// One side's buffer for the exchange: device memory or host memory.
class Buffer {
 public:
  Buffer(const CudaDriver& driver, Where where, size_t bytes)
      : where_(where), host_(where == Where::kHost ? bytes : 0), device_(driver, where == Where::kDevice ? bytes : 1) {}
  bool ok() const { return where_ == Where::kHost || device_.ok(); }
  std::byte* data() { return where_ == Where::kHost ? host_.data() : device_.data(); }
  void write(const std::vector<std::byte>& bytes) {
    if (where_ == Where::kHost) {
      std::copy(bytes.begin(), bytes.end(), host_.begin());
    } else {
      device_.write(bytes);
    }
  }
  std::vector<std::byte> read() const { return where_ == Where::kHost ? host_ : device_.read(); }

 private:
  Where where_;
  std::vector<std::byte> host_;
  DeviceBuffer device_;
};

TEST_F(CudaStaging, MessagesBetweenDeviceAndHostMemoryArriveIntact) {
  auto domain = cuda_domain();
  ASSERT_TRUE(domain.is_ok()) << domain.status().to_string();
  auto sender_ctx = Context::create().value();
  auto receiver_ctx = Context::create().value();
  ASSERT_TRUE(sender_ctx->add_memory_domain(**domain).is_ok());
  ASSERT_TRUE(receiver_ctx->add_memory_domain(**domain).is_ok());
  auto listener = receiver_ctx->listen("127.0.0.1:0").value();
  auto sender = sender_ctx->connect("127.0.0.1:" + std::to_string(listener->port()), 10s).value();
  auto receiver = listener->accept(10s).value();

  const uint64_t eager = sender_ctx->config().eager_limit;
  const uint64_t chunk = sender_ctx->config().chunk_bytes;
  const std::vector<uint64_t> sizes = {1,     eager - 1, eager,         eager + 1,     chunk - 1,
                                       chunk, chunk + 1, 3 * chunk + 7, (24 << 20) + 5};
  constexpr size_t kCapacity = (24 << 20) + 4096;
  struct Pairing {
    Where from, to;
    const char* name;
  };
  const Pairing pairings[] = {{Where::kDevice, Where::kDevice, "device -> device"},
                              {Where::kHost, Where::kDevice, "host -> device"},
                              {Where::kDevice, Where::kHost, "device -> host"}};
  uint64_t tag = 1;
  for (const Pairing& p : pairings) {
    Buffer src(*driver_, p.from, kCapacity);
    Buffer dst(*driver_, p.to, kCapacity);
    ASSERT_TRUE(src.ok() && dst.ok());
    for (uint64_t size : sizes) {
      SCOPED_TRACE(std::string(p.name) + ", " + std::to_string(size) + " bytes");
      const std::vector<std::byte> message = pattern(kCapacity, tag);
      src.write(message);
      dst.write(std::vector<std::byte>(kCapacity, std::byte{0xCD}));
      Request recv = receiver->recv(std::span(dst.data(), size), Tag{tag});
      Request send = sender->send(std::span<const std::byte>(src.data(), size), Tag{tag});
      const Status sent = send.wait(60s);
      const Status received = recv.wait(60s);
      ASSERT_TRUE(sent.is_ok()) << sent.to_string();
      ASSERT_TRUE(received.is_ok()) << received.to_string();
      EXPECT_EQ(recv.bytes(), size);
      const std::vector<std::byte> got = dst.read();
      ASSERT_EQ(compare_bytes(message.data(), got.data(), size), "");
      for (size_t i = size; i < got.size(); ++i)
        ASSERT_EQ(got[i], std::byte{0xCD}) << "written past the message at " << i;
      ++tag;
    }
  }
  EXPECT_GT(sender->stats().staged_transfers, 0u);
  EXPECT_GT(receiver->stats().staged_transfers, 0u);
}

}  // namespace
}  // namespace remora::device
