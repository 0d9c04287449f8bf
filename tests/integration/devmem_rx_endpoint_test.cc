// devmem TCP receive driven by the endpoint (datapath/devmem_rx_lease.h), on a machine
// where no NIC can do devmem. What is real here: `remora rxq serve` in its stand-in mode
// (a process of its own; the Unix-socket protocol, SCM_RIGHTS, the per-connection lease
// whose end removes the flows, all for real; its buffer a memfd), the endpoints and
// their data streams (loopback TCP, another process sending), the test device's memory.
// What stands in for the kernel and NIC (and only in this, the receiving, process):
// recvmsg(MSG_SOCK_DEVMEM), which reads the real bytes off the socket and lays them into
// free pages of rxq's buffer with tokens, as the NIC's DMA would, and SO_DEVMEM_DONTNEED
// (tests/zerocopy/devmem_nic_standin.h). So every byte this process receives on a data
// stream comes out of rxq's buffer, through the endpoint's devmem receivers: handshake
// answers, host messages, and device messages and gets (scattered to the test device
// by its copy engine); each test checks what arrived by checksum and that every token
// went back. Also: a flow that arrives with no devmem control message (a misrouted one)
// fails the transfer with that reason; rxq in stand-in mode without the stand-in kernel,
// or no rxq at all, leaves the streams plain and device transfers staged, saying why.
#include <net/if.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "datapath/devmem_rx_lease.h"
#include "device/require_cuda.h"
#include "itest_util.h"
#include "remora/cuda.h"
#include "remora/testing/test_device.h"
#include "support/exchange.h"
#include "support/test_data.h"
#include "zerocopy/devmem_nic_standin.h"
#include "zerocopy/rxq_client.h"
#include "zerocopy/zcrx_nic_standin.h"
#include "zerocopy/zcrx_queue.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;
using testing::TestDeviceDomain;
namespace rq = remora::zerocopy::rxq;

constexpr uint64_t kChunk = 64 * 1024;
constexpr uint64_t kBuffer = uint64_t{16} << 20;  // rxq's stand-in buffer

/// `remora rxq serve --standin` on lo, with a socket and journal of its own.
class RxqStandin {
 public:
  /// `client_queues`: rxq's --client-queues (queues for clients' own dmabufs).
  explicit RxqStandin(uint32_t client_queues = 0) {
    char tmpl[] = "/tmp/remora-rxq-ep-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      ADD_FAILURE() << "mkdtemp";
      return;
    }
    dir_ = tmpl;
    socket_ = dir_ + "/rxq.sock";
    serve_ = std::make_unique<Process>(
        Process::Options{.argv = {REMORA_TOOL_PATH, "rxq", "serve", "--standin", "--ifname", "lo", "--queues", "2",
                                  "--socket", socket_, "--journal", dir_ + "/rxq.journal", "--dmabuf-size",
                                  std::to_string(kBuffer), "--client-queues", std::to_string(client_queues)},
                         .env = {},
                         .capture_stderr = true});
    EXPECT_TRUE(serve_->ok()) << serve_->error();
    ready_ = read_until("rxq: serving lo queues 0,1 on " + socket_);
    EXPECT_TRUE(ready_) << log_;
  }
  ~RxqStandin() {
    if (serve_ != nullptr && serve_->ok()) {
      serve_->signal(SIGTERM);
      EXPECT_TRUE(read_until("stopped; lo is as it was")) << log_;
      auto st = serve_->wait(30s);
      EXPECT_TRUE(st.has_value() && Process::exited_ok(*st)) << log_;
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  RxqStandin(const RxqStandin&) = delete;
  RxqStandin& operator=(const RxqStandin&) = delete;

  bool ready() const { return ready_; }
  const std::string& socket() const { return socket_; }
  /// Reads rxq's lines until one contains `want`.
  bool read_until(const std::string& want) {
    for (;;) {
      auto line = serve_->read_line(30000ms);
      if (!line) return false;
      log_ += *line + "\n";
      if (line->find(want) != std::string::npos) return true;
    }
  }
  const std::string& log() const { return log_; }

 private:
  std::string dir_, socket_, log_;
  std::unique_ptr<Process> serve_;
  bool ready_ = false;
};

/// The stand-in NIC laying bytes into rxq's buffer, which it maps writable through a
/// lease of its own (a flow no stream has), and installed as the kernel's devmem receive
/// for the test's duration.
struct StandinRx {
  zerocopy::test::NicStandIn nic;
  std::unique_ptr<rq::Client> client;
  void* map = nullptr;

  explicit StandinRx(const std::string& socket, bool install = true) {
    auto c = rq::Client::connect(socket);
    EXPECT_TRUE(c.is_ok()) << describe(c.status());
    if (!c) return;
    client = std::make_unique<rq::Client>(std::move(*c));
    zerocopy::TcpFlow flow;
    flow.dst_port = 9;
    auto lease = client->bind_flow(flow);
    EXPECT_TRUE(lease.is_ok()) << describe(lease.status());
    if (!lease) return;
    EXPECT_EQ(lease->reply.dmabuf_size, kBuffer);
    map = ::mmap(nullptr, kBuffer, PROT_READ | PROT_WRITE, MAP_SHARED, lease->dmabuf.get(), 0);
    EXPECT_NE(map, MAP_FAILED);
    if (map == MAP_FAILED) return;
    nic.dmabuf = static_cast<std::byte*>(map);
    nic.binding = lease->reply.binding_id;  // 0: stand-in mode
    nic.init(kBuffer / zerocopy::test::NicStandIn::kPage);
    if (!install) return;
    auto k = std::make_shared<detail::DevmemRxKernel>();
    k->recvmsg = nic.recvmsg_fn();
    k->dontneed = nic.dontneed_fn();
    k->standin = true;
    detail::set_devmem_rx_kernel_for_tests(std::move(k));
  }
  ~StandinRx() {
    detail::set_devmem_rx_kernel_for_tests(nullptr);
    if (map != nullptr && map != MAP_FAILED) ::munmap(map, kBuffer);
  }
  StandinRx(const StandinRx&) = delete;
  StandinRx& operator=(const StandinRx&) = delete;
};

/// The stand-in NIC for an endpoint's own receive area (REMORA_RXQ_DEVICE_AREA): it lays
/// the bytes into the area, in the test device's memory, once the endpoint has bound it.
struct AreaStandin {
  zerocopy::test::NicStandIn nic;
  std::byte* area = nullptr;
  uint64_t area_size = 0;

  explicit AreaStandin(MemoryDomain* dev) {
    auto k = std::make_shared<detail::DevmemRxKernel>();
    k->recvmsg = nic.recvmsg_fn();
    k->dontneed = nic.dontneed_fn();
    k->standin = true;
    k->area_bound = [this, dev](const detail::DevmemRxBinding& b, std::byte* a, uint64_t size) {
      EXPECT_EQ(area, nullptr) << "a second area";
      area = a;
      area_size = size;
      nic.dev = dev;
      nic.dmabuf = a;
      // Where the area is in the dmabuf, as the NIC would know it: from the device's own
      // export, not from what the endpoint made of it.
      auto exported = dev->export_dmabuf(a, size);
      ASSERT_TRUE(exported.is_ok()) << describe(exported.status());
      ::close(exported->fd);
      nic.frag_base = exported->offset;
      EXPECT_EQ(b.base + exported->offset, a) << "the receivers would look for fragments elsewhere";
      nic.binding = b.id;
      nic.init(size / zerocopy::test::NicStandIn::kPage);
    };
    detail::set_devmem_rx_kernel_for_tests(std::move(k));
  }
  ~AreaStandin() { detail::set_devmem_rx_kernel_for_tests(nullptr); }
  AreaStandin(const AreaStandin&) = delete;
  AreaStandin& operator=(const AreaStandin&) = delete;
};

/// A context with a test device, REMORA_RXQ_SOCKET set to `socket` ("" none), and
/// REMORA_AUTH_KEY to `key` ("" none).
DeviceContext rx_context(const std::string& socket, DevicePathMode mode = DevicePathMode::kAuto,
                         const std::string& key = "") {
  DeviceContext d;
  d.dev = TestDeviceDomain::create({.capacity = size_t{64} << 20}).value();
  // Read by Context::create.
  if (!socket.empty()) ::setenv("REMORA_RXQ_SOCKET", socket.c_str(), 1);
  if (!key.empty()) ::setenv("REMORA_AUTH_KEY", key.c_str(), 1);
  auto ctx = Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = kChunk, .device_path = mode});
  ::unsetenv("REMORA_RXQ_SOCKET");
  ::unsetenv("REMORA_AUTH_KEY");
  EXPECT_TRUE(ctx.is_ok()) << describe(ctx.status());
  if (!ctx) return d;
  d.ctx = std::move(ctx).value();
  EXPECT_TRUE(d.ctx->add_memory_domain(*d.dev).is_ok());
  return d;
}

/// What `dev` holds at [p, p + len).
std::vector<std::byte> device_bytes(TestDeviceDomain& dev, const std::byte* p, size_t len) {
  std::vector<std::byte> got(len);
  EXPECT_TRUE(dev.read(got.data(), p, len).is_ok());
  return got;
}

/// Messages sent to the device-echo peer come back, into device memory and into host
/// memory, each checked byte for byte.
void echo_into_device_and_host(PeerSession& s, DeviceContext& mine, const std::vector<uint64_t>& sizes,
                               size_t first = 0) {
  std::byte* dev_in = mine.dev->allocate(6 * kChunk).value();
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t i = first + k;  // the message's number in the peer's list
    const uint64_t size = sizes[k];
    const bool to_device = i % 2 == 0;
    SCOPED_TRACE(fmt::format("message {} of {} bytes into {} memory", i, size, to_device ? "device" : "host"));
    const auto data = stream_bytes(size, i + 1);
    ASSERT_TRUE(s.ep->send(std::span(data), Tag{100 + i}).wait(60s).is_ok());
    auto line = s.peer->read_line(60s);
    ASSERT_TRUE(line);
    EXPECT_EQ(*line, "RECV " + std::to_string(i) + " ok " + hex64(XXH3_64bits(data.data(), data.size())));
    if (to_device) {
      const Status got = s.ep->recv(std::span(dev_in, size), Tag{200 + i}).wait(60s);
      ASSERT_TRUE(got.is_ok()) << describe(got);
      EXPECT_TRUE(device_bytes(*mine.dev, dev_in, size) == data);
    } else {
      std::vector<std::byte> host(size);
      const Status got = s.ep->recv(std::span(host), Tag{200 + i}).wait(60s);
      ASSERT_TRUE(got.is_ok()) << describe(got);
      EXPECT_TRUE(host == data);
    }
  }
}

/// The device-echo peer (echoing `sizes` in order, then following our close), listening,
/// and our endpoint to it; `env` for the peer besides REMORA_CHUNK_SIZE.
PeerSession start_echo_peer(Context& ctx, const std::vector<uint64_t>& sizes, std::vector<std::string> env = {}) {
  std::string list;
  for (uint64_t v : sizes) list += (list.empty() ? "" : ",") + std::to_string(v);
  env.push_back("REMORA_CHUNK_SIZE=" + std::to_string(kChunk));
  return start_listening_peer(ctx, {"--scenario=device-echo", "--sizes=" + list, "--close=follow"}, env);
}

/// A context receiving through rxq at `socket` under `mode`, whose endpoints take an area
/// of `area` bytes (REMORA_RXQ_DEVICE_AREA, as the variable spells it) of `dev`'s memory;
/// `dev` added to it.
std::unique_ptr<Context> area_context(const std::string& socket, const char* area, MemoryDomain& dev,
                                      DevicePathMode mode = DevicePathMode::kAuto) {
  ::setenv("REMORA_RXQ_SOCKET", socket.c_str(), 1);
  ::setenv("REMORA_RXQ_DEVICE_AREA", area, 1);
  auto ctx = Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = kChunk, .device_path = mode});
  ::unsetenv("REMORA_RXQ_SOCKET");
  ::unsetenv("REMORA_RXQ_DEVICE_AREA");
  EXPECT_TRUE(ctx.is_ok()) << describe(ctx.status());
  if (!ctx) return nullptr;
  EXPECT_TRUE((*ctx)->add_memory_domain(dev).is_ok());
  return std::move(ctx).value();
}

/// The device-echo peer's DONE, our close handshake and the peer's clean exit.
void finish_echo_session(PeerSession& s) {
  EXPECT_EQ(*s.peer->read_line(60s), "DONE");
  EXPECT_EQ(close_handshake(*s.ep, true, 30s), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
}

/// Under REMORA_DEVICE_PATH=zcrx, a receive into device memory [dst, dst + len) fails with
/// `unsupported` naming the demanded path and `says`; then the endpoint is dropped, the
/// peer left to end as it will.
void expect_zcrx_receive_refused(PeerSession& s, std::byte* dst, size_t len, const std::string& says) {
  const Status refused = s.ep->recv(std::span(dst, len), Tag{200}).wait(60s);
  EXPECT_EQ(refused.code(), StatusCode::kUnsupported) << describe(refused);
  EXPECT_NE(refused.message().find("REMORA_DEVICE_PATH=zcrx"), std::string::npos) << describe(refused);
  EXPECT_NE(refused.message().find(says), std::string::npos) << describe(refused);
  std::cout << "[ refused  ] " << refused.message() << "\n";
  EXPECT_EQ(s.ep->stats().device_path_refusals, 1u);
  s.ep->abort();
  s.ep.reset();
  (void)finish(*s.peer);
}

void connected_endpoint_through_rxq(const std::string& key, size_t max_read = 0);

TEST(DevmemRxEndpoint, EveryByteOfAConnectedEndpointComesOutOfRxqsBufferAndEveryTokenGoesBack) {
  for (const std::string key : {"", "a-job-secret-for-this-test"}) {
    SCOPED_TRACE(key.empty() ? "no authentication" : "authenticated (challenges on the steered streams too)");
    connected_endpoint_through_rxq(key);
  }
  // Reads that come back short while more is queued (the kernel's devmem recvmsg stops
  // where linear and dmabuf data meet): the streams are read on until they would block,
  // or, edge-triggered, they would stall with the rest of a chunk queued.
  SCOPED_TRACE("short reads");
  connected_endpoint_through_rxq("", 5000);
}

/// One run of the test above: we connect to a device-echo peer through rxq's steering.
void connected_endpoint_through_rxq(const std::string& key, size_t max_read) {
  RxqStandin rxq;
  ASSERT_TRUE(rxq.ready());
  StandinRx standin(rxq.socket());
  ASSERT_NE(standin.nic.dmabuf, nullptr);
  standin.nic.max_read = max_read;
  DeviceContext mine = rx_context(rxq.socket(), DevicePathMode::kAuto, key);
  ASSERT_TRUE(mine.ctx);
  // Chunked sizes alternate device and host destinations: one chunk and one, several
  // chunks, and a 1-byte message (eager: it comes on the control stream).
  const std::vector<uint64_t> sizes = {kChunk + 1, kChunk + 1, 5 * kChunk + 3, 5 * kChunk + 3, 1, 1};
  // We connect: our streams are steered before their hellos, so even the answers come
  // through the receivers.
  std::vector<std::string> env;
  if (!key.empty()) env.push_back("REMORA_AUTH_KEY=" + key);
  PeerSession s = start_echo_peer(*mine.ctx, sizes, env);
  ASSERT_TRUE(s.ep);
  const uint64_t handshake = standin.nic.bytes;
  // The HELLO_ACKs of both data streams (and with a key, the challenges and
  // confirmations before them).
  EXPECT_GT(handshake, 0u);
  // Up to the last chunked one into device memory (sizes[2]: five chunks and three).
  echo_into_device_and_host(s, mine, std::vector<uint64_t>(sizes.begin(), sizes.begin() + 3));
  EndpointStats chunked = s.ep->stats();
  EXPECT_EQ(chunked.device_path, "devmem") << chunked.device_path_reason;
  EXPECT_NE(chunked.device_path_reason.find("devmem RX into test-device memory: rxq's stand-in memfd of 16777216 "
                                            "bytes, binding 0; streams steered to queues "),
            std::string::npos)
      << chunked.device_path_reason;
  echo_into_device_and_host(s, mine, std::vector<uint64_t>(sizes.begin() + 3, sizes.end()), 3);

  const EndpointStats st = s.ep->stats();
  // The last device receive was the eager one: it staged, and says why.
  EXPECT_EQ(st.device_path, "staging") << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find("came inline on the control stream: copied to test-device memory from there"),
            std::string::npos)
      << st.device_path_reason;
  EXPECT_EQ(st.devmem_transfers, 2u);  // the chunked device receives
  EXPECT_EQ(st.staged_transfers, 1u);  // the eager one: copied from the control stream
  // The peer is a process of this host, yet this side offered it no same-host pulls:
  // its streams are steered to devmem RX queues.
  EXPECT_NE(st.same_host_reason.find("devmem or zcrx RX queues"), std::string::npos) << st.same_host_reason;
  EXPECT_EQ(st.bytes_pulled, 0u);
  // Every rendezvous byte came out of the buffer (the eager ones came on the control stream).
  EXPECT_EQ(standin.nic.bytes - handshake, 2 * (kChunk + 1) + 2 * (5 * kChunk + 3));
  EXPECT_EQ(standin.nic.tokens_out(), 0u);
  EXPECT_EQ(*s.peer->read_line(60s), "DONE");
  EXPECT_EQ(close_handshake(*s.ep, true, 30s), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
  // The endpoint's lease ended with it: rxq removed both of its flows.
  EXPECT_TRUE(rxq.read_until(fmt::format("removed client pid {}'s flow-type tcp4", ::getpid()))) << rxq.log();
  EXPECT_TRUE(rxq.read_until(fmt::format("removed client pid {}'s flow-type tcp4", ::getpid()))) << rxq.log();
}

/// The stand-in kernel, breaking one data stream once armed: at the `at`-th recvmsg
/// that hands over bytes its connection is reset (shut down here; every recvmsg on it
/// from then on fails with ECONNRESET, what was queued behind lost, as after a RST).
struct BreakingRx {
  std::atomic<bool> armed{false};
  std::atomic<uint64_t> reads{0};
  std::atomic<int> broken{-1};
  uint64_t at;
  StandinRx standin;
  BreakingRx(const std::string& socket, uint64_t at_read) : at(at_read), standin(socket, /*install=*/false) {
    auto k = std::make_shared<detail::DevmemRxKernel>();
    k->recvmsg = [this](int fd, msghdr* m, int flags) -> ssize_t {
      if (fd == broken.load()) {
        errno = ECONNRESET;
        return -1;
      }
      const ssize_t n = standin.nic.recvmsg(fd, m, flags);
      if (n > 0 && armed.load() && reads.fetch_add(1) + 1 == at) {
        ::shutdown(fd, SHUT_RDWR);
        broken = fd;
      }
      return n;
    };
    k->dontneed = standin.nic.dontneed_fn();
    k->standin = true;
    detail::set_devmem_rx_kernel_for_tests(std::move(k));
  }
};

// Failover (docs/rails.md): one of the two data streams is reset in the middle of a
// message coming into device memory by devmem. It is retired, the chunks on it that
// were not read whole come again on the other stream and are placed from the dmabuf
// like the rest, and the message lands once, every byte checked. Every token goes back,
// the broken stream's too: its socket stays open until its placements ended.
TEST(DevmemRxEndpoint, AStreamBrokenMidReceiveHasItsChunksReadAgainOnTheOther) {
  RxqStandin rxq;
  ASSERT_TRUE(rxq.ready());
  BreakingRx breaking(rxq.socket(), 8);
  ASSERT_NE(breaking.standin.nic.dmabuf, nullptr);
  breaking.standin.nic.max_read = 16 * 1024;  // four reads a chunk: the 8th is inside one
  DeviceContext mine = rx_context(rxq.socket());
  ASSERT_TRUE(mine.ctx);
  const std::vector<uint64_t> sizes = {6 * kChunk - 5};
  PeerSession s = start_echo_peer(*mine.ctx, sizes);
  ASSERT_TRUE(s.ep);
  breaking.armed = true;
  echo_into_device_and_host(s, mine, sizes);
  breaking.armed = false;
  EXPECT_GE(breaking.broken.load(), 0) << "no stream was broken (" << breaking.reads << " reads)";
  const EndpointStats st = s.ep->stats();
  EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
  EXPECT_EQ(st.devmem_transfers, 1u);
  EXPECT_TRUE(st.failover);
  EXPECT_EQ(st.streams_retired, 1u);
  finish_echo_session(s);
  EXPECT_EQ(breaking.standin.nic.tokens_out(), 0u);
}

TEST(DevmemRxEndpoint, AReceiveAreaOfItsOwnInDeviceMemoryTakesEveryByteAndDeviceReceivesScatterThere) {
  // TCPX's model: the endpoint hands rxq a dmabuf of its own device memory, and the NIC
  // lays every byte of its streams there; device receives are scattered within the
  // device, host ones copied out by the device's copies.
  RxqStandin rxq(/*client_queues=*/1);
  ASSERT_TRUE(rxq.ready());
  DeviceContext mine;
  mine.dev = TestDeviceDomain::create({.capacity = size_t{64} << 20, .export_memfd = true}).value();
  AreaStandin standin(mine.dev.get());
  // Device memory taken first, so that the area is not at the dmabuf's byte 0 and its
  // place in the dmabuf matters.
  ASSERT_TRUE(mine.dev->allocate(1 << 20).is_ok());
  constexpr uint64_t kArea = 4 << 20;
  mine.ctx = area_context(rxq.socket(), "4M", *mine.dev);
  ASSERT_TRUE(mine.ctx);
  const std::vector<uint64_t> sizes = {kChunk + 1, kChunk + 1, 5 * kChunk + 3, 5 * kChunk + 3};
  PeerSession s = start_echo_peer(*mine.ctx, sizes);
  ASSERT_TRUE(s.ep);
  ASSERT_NE(standin.area, nullptr) << "the endpoint bound no area";
  EXPECT_EQ(standin.area_size, kArea);
  EXPECT_TRUE(mine.dev->owns(standin.area, kArea));  // the area is the device's memory
  EXPECT_TRUE(rxq.read_until(fmt::format("client pid {}: its dmabuf of ", ::getpid()))) << rxq.log();
  const uint64_t handshake = standin.nic.bytes;
  EXPECT_GT(handshake, 0u);  // the hello answers came through the area, copied to the host
  // Device, host, device, host: each byte for byte.
  echo_into_device_and_host(s, mine, sizes);
  const EndpointStats st = s.ep->stats();
  EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find("devmem RX into test-device memory: its own receive area of 4194304 bytes of "
                                       "test-device memory (rxq's stand-in mode: not bound), binding 0 on rxq's queue "
                                       "2 for it; streams steered to queues 2, 2"),
            std::string::npos)
      << st.device_path_reason;
  EXPECT_EQ(st.devmem_transfers, 2u);
  EXPECT_EQ(st.staged_transfers, 0u);
  EXPECT_EQ(standin.nic.bytes - handshake, 2 * (kChunk + 1) + 2 * (5 * kChunk + 3));
  EXPECT_EQ(standin.nic.tokens_out(), 0u);
  EXPECT_EQ(*s.peer->read_line(60s), "DONE");
  EXPECT_EQ(close_handshake(*s.ep, true, 30s), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
  // The lease ended with the endpoint: rxq removed the flows and freed the queue.
  EXPECT_TRUE(rxq.read_until(fmt::format("client pid {}: its dmabuf on queue 2 released", ::getpid()))) << rxq.log();
}

TEST(DevmemRxEndpoint, AnAcceptedEndpointGetsIntoDeviceMemoryByDevmem) {
  RxqStandin rxq;
  ASSERT_TRUE(rxq.ready());
  StandinRx standin(rxq.socket());
  ASSERT_NE(standin.nic.dmabuf, nullptr);
  DeviceContext mine = rx_context(rxq.socket());
  ASSERT_TRUE(mine.ctx);
  auto listener = mine.ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(listener.is_ok()) << describe(listener.status());
  // The peer connects: our streams are steered when their hellos arrive, before the answers.
  const uint64_t len = 3 * kChunk + 17;
  auto peer = spawn_peer({"--scenario=device-rma", "--size=" + std::to_string(len), "--seed=5", "--role=connect",
                          "--address=127.0.0.1:" + std::to_string((*listener)->port())},
                         {"REMORA_CHUNK_SIZE=" + std::to_string(kChunk)});
  auto ep = (*listener)->accept(30s);
  ASSERT_TRUE(ep.is_ok()) << describe(ep.status());
  std::vector<std::byte> key(512);
  Request kr = (*ep)->recv(std::span(key), Tag{1});
  ASSERT_TRUE(kr.wait(60s).is_ok());
  auto rkey = RemoteKey::deserialize(std::span(key.data(), kr.bytes()));
  ASSERT_TRUE(rkey.is_ok()) << describe(rkey.status());
  std::vector<std::byte> expect(len);
  fill_stream(5, 0, expect);

  // A chunked get into device memory, from an unaligned offset of the region.
  std::byte* dst = mine.dev->allocate(len).value();
  const Status got = (*ep)->get(std::span(dst, len - 9), *rkey, 9).wait(60s);
  ASSERT_TRUE(got.is_ok()) << describe(got);
  EXPECT_TRUE(device_bytes(*mine.dev, dst, len - 9) == std::vector<std::byte>(expect.begin() + 9, expect.end()));
  EndpointStats st = (*ep)->stats();
  EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
  EXPECT_EQ(st.devmem_transfers, 1u);
  // And into host memory, through the same receivers.
  std::vector<std::byte> host(len);
  ASSERT_TRUE((*ep)->get(std::span(host), *rkey, 0).wait(60s).is_ok());
  EXPECT_TRUE(host == expect);
  EXPECT_GE(standin.nic.bytes, (len - 9) + len);
  EXPECT_EQ(standin.nic.tokens_out(), 0u);

  const std::byte done{1};
  ASSERT_TRUE((*ep)->send(std::span(&done, 1), Tag{2}).wait(60s).is_ok());
  auto region = peer->read_line(60s);
  ASSERT_TRUE(region);
  EXPECT_EQ(*region, "REGION " + hex64(XXH3_64bits(expect.data(), expect.size())));
  EXPECT_EQ(*peer->read_line(60s), "DONE");
  EXPECT_EQ(close_handshake(**ep, true, 30s), "");
  ep->reset();
  expect_peer_success(*peer);
}

TEST(DevmemRxEndpoint, PutsIntoARegionOfDeviceMemoryArePlacedFromRxqsBufferAndNotifyAfter) {
  RxqStandin rxq;
  ASSERT_TRUE(rxq.ready());
  StandinRx standin(rxq.socket());
  ASSERT_NE(standin.nic.dmabuf, nullptr);
  DeviceContext target = rx_context(rxq.socket());  // before the pair: its device outlives it
  ASSERT_TRUE(target.ctx);
  auto initiator =
      Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = kChunk, .ignore_env = true});
  ASSERT_TRUE(initiator.is_ok()) << describe(initiator.status());
  // The target accepts: its streams are steered as their hellos arrive. The initiator's
  // are plain (no rxq for it), so only the target's receives go through the stand-in.
  Pair p = make_pair_in_process(std::move(target.ctx), std::move(*initiator));
  ASSERT_TRUE(p.ea && p.eb);
  const uint64_t len = 4 * kChunk + 11;
  std::byte* mem = target.dev->allocate(len).value();
  auto region = p.a->register_memory(mem, len, Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());
  const RemoteKey key = region->remote_key();

  // A chunked put with a notification, at an offset; then an inline one.
  const auto data = stream_bytes(len - 3, 6);
  const Status put = p.eb->put(std::span(data), key, 3, PutOptions{.notify = 42}).wait(60s);
  ASSERT_TRUE(put.is_ok()) << describe(put);
  auto n = p.ea->wait_notification(60s);
  ASSERT_TRUE(n.is_ok()) << describe(n.status());
  EXPECT_EQ(n->value, 42u);
  EXPECT_EQ(n->offset, 3u);
  EXPECT_EQ(n->length, len - 3);
  EXPECT_TRUE(device_bytes(*target.dev, mem + 3, len - 3) == data);
  EndpointStats st = p.ea->stats();
  EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
  EXPECT_EQ(st.devmem_transfers, 1u);
  EXPECT_EQ(st.served_puts, 1u);
  EXPECT_GE(standin.nic.bytes, len - 3);
  EXPECT_EQ(standin.nic.tokens_out(), 0u);

  const auto small = stream_bytes(100, 7);
  ASSERT_TRUE(p.eb->put(std::span(small), key, 0).wait(60s).is_ok());
  EXPECT_TRUE(device_bytes(*target.dev, mem, 100) == small);
  st = p.ea->stats();
  EXPECT_EQ(st.device_path, "staging") << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find("this transfer's bytes come inline on the control stream"), std::string::npos)
      << st.device_path_reason;
  EXPECT_EQ(st.served_puts, 2u);
  reset(p);  // before `target`, whose device the contexts use
}

TEST(DevmemRxEndpoint, BytesWithNoDevmemControlMessageFailTheTransferAsAMisroutedFlow) {
  RxqStandin rxq;
  ASSERT_TRUE(rxq.ready());
  StandinRx standin(rxq.socket());
  ASSERT_NE(standin.nic.dmabuf, nullptr);
  for (const bool to_device : {true, false}) {
    SCOPED_TRACE(to_device ? "into device memory" : "into host memory");
    standin.nic.misroute = false;
    DeviceContext mine = rx_context(rxq.socket());
    ASSERT_TRUE(mine.ctx);
    PeerSession s = start_listening_peer(*mine.ctx, {"--scenario=device-echo", "--sizes=" + std::to_string(kChunk * 2)},
                                         {"REMORA_CHUNK_SIZE=" + std::to_string(kChunk)});
    ASSERT_TRUE(s.ep);
    // From now on the flow is not steered: its bytes arrive as plain ones.
    standin.nic.misroute = true;
    const auto data = stream_bytes(2 * kChunk, 4);
    ASSERT_TRUE(s.ep->send(std::span(data), Tag{100}).wait(60s).is_ok());
    std::byte* dev_in = mine.dev->allocate(2 * kChunk).value();
    std::vector<std::byte> host(2 * kChunk);
    const Status got = to_device ? s.ep->recv(std::span(dev_in, 2 * kChunk), Tag{200}).wait(60s)
                                 : s.ep->recv(std::span(host), Tag{200}).wait(60s);
    EXPECT_EQ(got.code(), StatusCode::kProtocol) << describe(got);
    EXPECT_NE(got.message().find("misrouted flow"), std::string::npos) << describe(got);
    EXPECT_EQ(standin.nic.tokens_out(), 0u);
    s.ep->abort();
    s.ep.reset();
    (void)finish(*s.peer);  // the peer sees us go; its exit status is not the point
    // rxq saw the lease end.
    EXPECT_TRUE(rxq.read_until(fmt::format("removed client pid {}'s flow-type tcp4", ::getpid()))) << rxq.log();
    EXPECT_TRUE(rxq.read_until(fmt::format("removed client pid {}'s flow-type tcp4", ::getpid()))) << rxq.log();
  }
}

TEST(DevmemRxEndpoint, WithoutASteeringRxqTheStreamsStayPlainAndDeviceReceivesStageSayingWhy) {
  RxqStandin rxq;
  ASSERT_TRUE(rxq.ready());
  struct Case {
    std::string socket;
    const char* says;
  };
  const Case cases[] = {
      // rxq in stand-in mode, but nothing stands in for the kernel: nothing would steer.
      {rxq.socket(), "rxq serves in stand-in mode (its buffer is a memfd, not a dmabuf, and no rule steers"},
      {"/nonexistent/rxq.sock", "is `remora rxq serve --socket /nonexistent/rxq.sock` running?"},
      {"", "REMORA_RXQ_SOCKET is unset"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.socket);
    DeviceContext mine = rx_context(c.socket);
    ASSERT_TRUE(mine.ctx);
    PeerSession s = start_listening_peer(
        *mine.ctx, {"--scenario=device-echo", "--sizes=" + std::to_string(3 * kChunk + 1), "--close=follow"},
        {"REMORA_CHUNK_SIZE=" + std::to_string(kChunk)});
    ASSERT_TRUE(s.ep);
    if (c.socket == rxq.socket()) {
      // Nothing steered: the endpoint let its lease go at once, so rxq already dropped
      // the flow it recorded (a real rxq would have removed its rule).
      EXPECT_TRUE(rxq.read_until("gone: removing its 1 flow(s)")) << rxq.log();
    }
    echo_into_device_and_host(s, mine, {3 * kChunk + 1});
    const EndpointStats st = s.ep->stats();
    EXPECT_EQ(st.device_path, "staging") << st.device_path_reason;
    EXPECT_NE(st.device_path_reason.find(c.says), std::string::npos) << st.device_path_reason;
    EXPECT_EQ(st.staged_transfers, 1u);
    EXPECT_EQ(st.devmem_transfers, 0u);
    EXPECT_EQ(*s.peer->read_line(60s), "DONE");
    EXPECT_EQ(close_handshake(*s.ep, true, 30s), "");
    s.ep.reset();
    expect_peer_success(*s.peer);
  }
  // Demanded, devmem RX refuses the device receive with the reason instead.
  DeviceContext demand = rx_context("", DevicePathMode::kDevmem);
  ASSERT_TRUE(demand.ctx);
  PeerSession s = start_listening_peer(*demand.ctx, {"--scenario=device-echo", "--sizes=100"});
  ASSERT_TRUE(s.ep);
  std::byte* dev_in = demand.dev->allocate(kChunk).value();
  const Status refused = s.ep->recv(std::span(dev_in, kChunk), Tag{200}).wait(60s);
  EXPECT_EQ(refused.code(), StatusCode::kUnsupported) << describe(refused);
  EXPECT_NE(refused.message().find("REMORA_RXQ_SOCKET is unset"), std::string::npos) << describe(refused);
  s.ep->abort();
  s.ep.reset();
  (void)finish(*s.peer);
}

TEST(DevmemRxEndpoint, TheDoctorSeesTheRxqThatWouldSteerEndpoints) {
  RxqStandin rxq;
  ASSERT_TRUE(rxq.ready());
  // stdout only, so that the JSON parses.
  Process doctor({.argv = {REMORA_TOOL_PATH, "doctor", "--json", "--no-bind", "-i", "lo"},
                  .env = {"REMORA_RXQ_SOCKET=" + rxq.socket()},
                  .capture_stderr = false});
  ASSERT_TRUE(doctor.ok()) << doctor.error();
  const std::string out = doctor.read_all(60s);
  auto st = doctor.wait(10s);
  ASSERT_TRUE(st.has_value());
  const nlohmann::json doc = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << out;
  EXPECT_EQ(doc["host"]["rxq"]["state"], "yes") << doc["host"]["rxq"].dump();
  EXPECT_NE(doc["host"]["rxq"]["detail"].get<std::string>().find("`remora rxq serve` accepts on " + rxq.socket()),
            std::string::npos)
      << doc["host"]["rxq"].dump();
  // It only connected: rxq saw a client come and go with no flow.
  EXPECT_TRUE(rxq.read_until("removing its 0 flow(s)")) << rxq.log();
}

// --- io_uring zcrx ---------------------------------------------------------------------
// REMORA_DEVICE_PATH=zcrx: rxq (its stand-in mode, a process of its own) reserves a
// client queue for the endpoint and steers its flows there; the endpoint registers that
// queue with an io_uring of its own and reads every data stream by RECV_ZC. What stands
// in for the kernel and NIC (only in this process) is the queue's kernel side
// (tests/zerocopy/zcrx_nic_standin.h): real bytes off the real sockets into the queue's
// area, completions in the kernel's layout, buffers back through the refill ring.

/// The zcrx stand-in NIC installed as the kernel's side of every endpoint's queue.
struct ZcrxStandin {
  std::shared_ptr<zerocopy::test::ZcrxNicStandIn::Shared> nic =
      std::make_shared<zerocopy::test::ZcrxNicStandIn::Shared>();
  std::byte* device_area = nullptr;  // an area in device memory, once the endpoint made it
  uint64_t device_area_size = 0;
  /// `real_kernel`: the real io_uring registration instead (rxq still in stand-in mode).
  /// `dev`: the device whose memory an area in device memory is (the NIC writes there by
  /// its copies).
  explicit ZcrxStandin(bool real_kernel = false, MemoryDomain* dev = nullptr) {
    auto k = std::make_shared<detail::DevmemRxKernel>();
    k->standin = true;
    k->area_bound = [this, dev](const detail::DevmemRxBinding&, std::byte* area, uint64_t size) {
      EXPECT_EQ(device_area, nullptr) << "a second area";
      device_area = area;
      device_area_size = size;
      nic->write_area = [dev, area](uint64_t offset, const std::byte* data, size_t n) {
        ASSERT_NE(dev, nullptr);
        auto copy = dev->copy_from_host(area + offset, data, n);
        ASSERT_TRUE(copy.is_ok()) << describe(copy.status());
        ASSERT_TRUE((*copy)->wait(30s).is_ok());
      };
    };
    k->zcrx = real_kernel ? zerocopy::io_uring_zcrx_kernels() : zerocopy::test::ZcrxNicStandIn::factory(nic);
    detail::set_devmem_rx_kernel_for_tests(std::move(k));
  }
  ~ZcrxStandin() { detail::set_devmem_rx_kernel_for_tests(nullptr); }
  ZcrxStandin(const ZcrxStandin&) = delete;
  ZcrxStandin& operator=(const ZcrxStandin&) = delete;
};

/// After the device-echo of {kChunk + 1, kChunk + 1, 5 * kChunk + 3, 5 * kChunk + 3}:
/// every rendezvous byte came through the queue's area after the `handshake` bytes, all
/// but an area's worth (`area_pages`) of buffers came back well formed already, the
/// session ends cleanly, and rxq frees the queue with the endpoint.
void finish_zcrx_session(PeerSession& s, RxqStandin& rxq, ZcrxStandin& standin, uint64_t handshake,
                         uint64_t area_pages) {
  EXPECT_EQ(standin.nic->bytes - handshake, 2 * (kChunk + 1) + 2 * (5 * kChunk + 3));
  EXPECT_GE(standin.nic->refills, standin.nic->completions - area_pages);
  EXPECT_EQ(standin.nic->bad_refills, 0u);
  finish_echo_session(s);
  EXPECT_TRUE(rxq.read_until(fmt::format("client pid {}: its zcrx queue 2 released", ::getpid()))) << rxq.log();
}

/// A context demanding zcrx through rxq at `socket`, with an area of 64 KiB (16 pages).
DeviceContext small_area_zcrx_context(const std::string& socket) {
  ::setenv("REMORA_ZCRX_AREA", "64K", 1);  // read by Context::create
  DeviceContext mine = rx_context(socket, DevicePathMode::kZcrx);
  ::unsetenv("REMORA_ZCRX_AREA");
  return mine;
}

TEST(ZcrxEndpoint, EveryByteOfAConnectedEndpointArrivesThroughItsOwnZcrxQueue) {
  RxqStandin rxq(/*client_queues=*/1);
  ASSERT_TRUE(rxq.ready());
  ZcrxStandin standin;
  // An area of 16 pages for ~800 KB of streams: its buffers go round through the refill ring.
  DeviceContext mine = small_area_zcrx_context(rxq.socket());
  ASSERT_TRUE(mine.ctx);
  const std::vector<uint64_t> sizes = {kChunk + 1, kChunk + 1, 5 * kChunk + 3, 5 * kChunk + 3, 1, 1};
  PeerSession s = start_echo_peer(*mine.ctx, sizes);
  ASSERT_TRUE(s.ep);
  EXPECT_TRUE(rxq.read_until(fmt::format("client pid {}: queue 2 reserved for its io_uring zcrx", ::getpid())))
      << rxq.log();
  EXPECT_EQ(standin.nic->registered_ifindex, ::if_nametoindex("lo"));
  EXPECT_EQ(standin.nic->registered_queue, 2u);
  const uint64_t handshake = standin.nic->bytes;
  EXPECT_GT(handshake, 0u);  // the data streams' HELLO_ACKs came through the queue
  echo_into_device_and_host(s, mine, std::vector<uint64_t>(sizes.begin(), sizes.begin() + 3));
  EndpointStats chunked = s.ep->stats();
  EXPECT_EQ(chunked.device_path, "zcrx") << chunked.device_path_reason;
  EXPECT_NE(chunked.device_path_reason.find("REMORA_DEVICE_PATH=zcrx: io_uring zcrx into test-device memory: io_uring "
                                            "zcrx (a test's stand-in NIC) on ifindex "),
            std::string::npos)
      << chunked.device_path_reason;
  EXPECT_NE(chunked.device_path_reason.find("RX queue 2"), std::string::npos) << chunked.device_path_reason;
  echo_into_device_and_host(s, mine, std::vector<uint64_t>(sizes.begin() + 3, sizes.end()), 3);
  const EndpointStats st = s.ep->stats();
  EXPECT_EQ(st.device_path, "staging") << st.device_path_reason;  // the eager one
  EXPECT_EQ(st.zcrx_transfers, 2u);                               // the chunked device receives
  EXPECT_EQ(st.devmem_transfers, 0u);
  EXPECT_EQ(st.staged_transfers, 1u);
  finish_zcrx_session(s, rxq, standin, handshake, /*area_pages=*/16);
}

// Failover, as for devmem above: one data stream's zcrx receive ends with its
// connection reset in the middle of a message into device memory; the chunks not read
// whole come again through the other stream's zcrx receive, and the message lands once,
// every byte checked, every buffer back through the refill ring.
TEST(ZcrxEndpoint, AStreamBrokenMidReceiveHasItsChunksReadAgainOnTheOther) {
  RxqStandin rxq(/*client_queues=*/1);
  ASSERT_TRUE(rxq.ready());
  ZcrxStandin standin;
  DeviceContext mine = small_area_zcrx_context(rxq.socket());
  ASSERT_TRUE(mine.ctx);
  const std::vector<uint64_t> sizes = {5 * kChunk + 3};
  PeerSession s = start_echo_peer(*mine.ctx, sizes);
  ASSERT_TRUE(s.ep);
  // 40 pages into the message's 81: inside its third chunk.
  standin.nic->reset_after = standin.nic->completions + 40;
  echo_into_device_and_host(s, mine, sizes);
  EXPECT_EQ(standin.nic->reset_after, 0u) << "no stream was reset";
  const EndpointStats st = s.ep->stats();
  EXPECT_EQ(st.device_path, "zcrx") << st.device_path_reason;
  EXPECT_EQ(st.zcrx_transfers, 1u);
  EXPECT_EQ(st.streams_retired, 1u);
  EXPECT_EQ(standin.nic->bad_refills, 0u);
  finish_echo_session(s);
  EXPECT_TRUE(rxq.read_until(fmt::format("client pid {}: its zcrx queue 2 released", ::getpid()))) << rxq.log();
}

TEST(ZcrxEndpoint, AnAreaInDeviceMemoryTakesEveryByteAndDeviceReceivesScatterThere) {
  // REMORA_RXQ_DEVICE_AREA with zcrx: the queue's area is a dmabuf of the endpoint's
  // device memory (IORING_ZCRX_AREA_DMABUF: the kernel takes only a whole dmabuf, so the
  // device exports the area alone); the NIC writes every byte of the streams there,
  // device receives are scattered within the device and host ones copied out.
  RxqStandin rxq(/*client_queues=*/1);
  ASSERT_TRUE(rxq.ready());
  DeviceContext mine;
  mine.dev = TestDeviceDomain::create({.capacity = size_t{64} << 20, .export_memfd = true, .export_areas_alone = true})
                 .value();
  ZcrxStandin standin(/*real_kernel=*/false, mine.dev.get());
  ASSERT_TRUE(mine.dev->allocate(1 << 20).is_ok());  // the area is not at the device's byte 0
  constexpr uint64_t kArea = 256 << 10;              // 64 pages for ~800 KB of streams
  mine.ctx = area_context(rxq.socket(), "256K", *mine.dev, DevicePathMode::kZcrx);
  ASSERT_TRUE(mine.ctx);
  const std::vector<uint64_t> sizes = {kChunk + 1, kChunk + 1, 5 * kChunk + 3, 5 * kChunk + 3};
  PeerSession s = start_echo_peer(*mine.ctx, sizes);
  ASSERT_TRUE(s.ep);
  ASSERT_NE(standin.device_area, nullptr) << "the endpoint made no area in device memory";
  EXPECT_EQ(standin.device_area_size, kArea);
  EXPECT_TRUE(mine.dev->owns(standin.device_area, kArea));
  EXPECT_TRUE(standin.nic->registered_dmabuf);  // registered as a dmabuf area, whole
  const uint64_t handshake = standin.nic->bytes;
  EXPECT_GT(handshake, 0u);  // the hello answers came through the device area, copied to the host
  echo_into_device_and_host(s, mine, sizes);
  const EndpointStats st = s.ep->stats();
  EXPECT_EQ(st.device_path, "zcrx") << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find("-byte dmabuf area"), std::string::npos) << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find(" in test-device memory"), std::string::npos) << st.device_path_reason;
  EXPECT_EQ(st.zcrx_transfers, 2u);
  EXPECT_EQ(st.staged_transfers, 0u);
  finish_zcrx_session(s, rxq, standin, handshake, kArea / 4096);
}

TEST(ZcrxEndpoint, AnAcceptingTargetTakesPutsAndGetsIntoDeviceMemoryByZcrx) {
  RxqStandin rxq(/*client_queues=*/1);
  ASSERT_TRUE(rxq.ready());
  ZcrxStandin standin;
  DeviceContext target = rx_context(rxq.socket(), DevicePathMode::kZcrx);
  ASSERT_TRUE(target.ctx);
  auto initiator =
      Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = kChunk, .ignore_env = true});
  ASSERT_TRUE(initiator.is_ok()) << describe(initiator.status());
  Pair p = make_pair_in_process(std::move(target.ctx), std::move(*initiator));
  ASSERT_TRUE(p.ea && p.eb);
  const uint64_t len = 4 * kChunk + 11;
  std::byte* mem = target.dev->allocate(len).value();
  auto region = p.a->register_memory(mem, len, Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());

  // A peer's chunked put with a notification, at an offset.
  const auto data = stream_bytes(len - 3, 6);
  const Status put = p.eb->put(std::span(data), region->remote_key(), 3, PutOptions{.notify = 42}).wait(60s);
  ASSERT_TRUE(put.is_ok()) << describe(put);
  auto n = p.ea->wait_notification(60s);
  ASSERT_TRUE(n.is_ok()) << describe(n.status());
  EXPECT_EQ(n->value, 42u);
  EXPECT_TRUE(device_bytes(*target.dev, mem + 3, len - 3) == data);
  EndpointStats st = p.ea->stats();
  EXPECT_EQ(st.device_path, "zcrx") << st.device_path_reason;
  EXPECT_EQ(st.zcrx_transfers, 1u);

  // Our chunked get into device memory, from the peer's host region.
  std::vector<std::byte> theirs = stream_bytes(len, 8);
  auto their_region = p.b->register_memory(theirs.data(), len, Access::kRemoteRead);
  ASSERT_TRUE(their_region.is_ok()) << describe(their_region.status());
  std::byte* dst = target.dev->allocate(len).value();
  const Status got = p.ea->get(std::span(dst, len - 9), their_region->remote_key(), 9).wait(60s);
  ASSERT_TRUE(got.is_ok()) << describe(got);
  EXPECT_TRUE(device_bytes(*target.dev, dst, len - 9) == std::vector<std::byte>(theirs.begin() + 9, theirs.end()));
  st = p.ea->stats();
  EXPECT_EQ(st.device_path, "zcrx") << st.device_path_reason;
  EXPECT_EQ(st.zcrx_transfers, 2u);
  EXPECT_GE(standin.nic->bytes, (len - 3) + (len - 9));
  EXPECT_EQ(standin.nic->bad_refills, 0u);
  reset(p);  // before `target`, whose device the contexts use
}

TEST(ZcrxEndpoint, AnAreaInDeviceMemoryThatIsNotAWholeDmabufIsRefused) {
  // The test device exports its areas as ranges of its one memfd here: the kernel would
  // let the NIC write all of it, so the endpoint refuses before registering anything.
  RxqStandin rxq(/*client_queues=*/1);
  ASSERT_TRUE(rxq.ready());
  DeviceContext mine;
  mine.dev = TestDeviceDomain::create({.capacity = size_t{64} << 20, .export_memfd = true}).value();
  ZcrxStandin standin(/*real_kernel=*/false, mine.dev.get());
  mine.ctx = area_context(rxq.socket(), "256K", *mine.dev, DevicePathMode::kZcrx);
  ASSERT_TRUE(mine.ctx);
  PeerSession s = start_listening_peer(*mine.ctx, {"--scenario=device-echo", "--sizes=100"});
  ASSERT_TRUE(s.ep);
  expect_zcrx_receive_refused(
      s, mine.dev->allocate(kChunk).value(), kChunk,
      "zcrx: REMORA_RXQ_DEVICE_AREA=262144 of test-device memory: zcrx takes a whole dmabuf as its area");
  EXPECT_EQ(standin.nic->registered_queue, 0u);  // nothing was registered
}

TEST(ZcrxEndpoint, WhereZcrxCannotBeSetUpTheDemandedPathRefusesWithTheReason) {
  struct Case {
    uint32_t client_queues;
    bool standin, real_kernel;
    const char* says;
  };
  const Case cases[] = {
      {0, true, false, "start it with --client-queues N"},
      // rxq in stand-in mode, nothing standing in for the kernel: nothing would steer.
      {1, false, false, "rxq serves in stand-in mode (queue 2 is reserved for us, but no rule steers"},
      // The real kernel asked to register loopback's queue for zcrx.
      {1, true, true, "io_uring zcrx registration of ifindex"},
  };
  // (An area in device memory whose export is not a dmabuf of its own is refused before
  // rxq is asked: AnAreaInDeviceMemoryThatIsNotAWholeDmabufIsRefused.)
  for (const Case& c : cases) {
    SCOPED_TRACE(c.says);
    RxqStandin rxq(c.client_queues);
    ASSERT_TRUE(rxq.ready());
    std::unique_ptr<ZcrxStandin> standin;
    if (c.standin) standin = std::make_unique<ZcrxStandin>(c.real_kernel);
    DeviceContext mine = rx_context(rxq.socket(), DevicePathMode::kZcrx);
    ASSERT_TRUE(mine.ctx);
    PeerSession s = start_listening_peer(*mine.ctx, {"--scenario=device-echo", "--sizes=100"});
    ASSERT_TRUE(s.ep);
    expect_zcrx_receive_refused(s, mine.dev->allocate(kChunk).value(), kChunk, c.says);
  }
}

// --- CUDA memory ----------------------------------------------------------------------
// The same receive path with the CUDA domain as the destination: each fragment goes from
// rxq's (mapped, host) buffer to CUDA memory by cuMemcpyHtoDAsync, and its tokens go
// back when that copy ended. CTest runs these against the emulated CUDA driver
// (integration.devmem_rx_cuda_with_emulated_driver, REMORA_TEST_REQUIRE_CUDA=1: they
// cannot skip there); on a GPU machine, with the real driver, they run on the GPU
// (scripts/gpu_check.sh). The plain integration run leaves them out.

class DevmemRxEndpointCuda : public ::testing::Test {
 protected:
  void SetUp() override { REMORA_CUDA_DOMAIN_OR_SKIP(cuda_); }
  void TearDown() override {
    for (void* p : allocations_) EXPECT_TRUE(cuda_free(p).is_ok());
  }

  /// A context receiving through rxq at `socket`, with the CUDA domain.
  std::unique_ptr<Context> context(const std::string& socket) {
    ::setenv("REMORA_RXQ_SOCKET", socket.c_str(), 1);
    auto ctx = Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = kChunk});
    ::unsetenv("REMORA_RXQ_SOCKET");
    EXPECT_TRUE(ctx.is_ok()) << describe(ctx.status());
    if (!ctx) return nullptr;
    EXPECT_TRUE((*ctx)->add_memory_domain(*cuda_).is_ok());
    return std::move(ctx).value();
  }
  /// CUDA memory of `len` bytes, each 0xCD.
  std::byte* allocate(size_t len) {
    auto p = cuda_allocate(len);
    EXPECT_TRUE(p.is_ok()) << describe(p.status());
    if (!p) return nullptr;
    allocations_.push_back(*p);
    const std::vector<std::byte> fill(len, std::byte{0xCD});
    auto copy = cuda_->copy_from_host(*p, fill.data(), len);
    EXPECT_TRUE(copy.is_ok() && (*copy)->wait(30s).is_ok());
    return static_cast<std::byte*>(*p);
  }
  /// What CUDA memory holds at [p, p + len).
  std::vector<std::byte> read(const std::byte* p, size_t len) {
    std::vector<std::byte> got(len);
    auto copy = cuda_->copy_to_host(got.data(), p, len);
    EXPECT_TRUE(copy.is_ok()) << describe(copy.status());
    if (copy) {
      EXPECT_TRUE((*copy)->wait(30s).is_ok());
    }
    return got;
  }

  /// Messages sent to the device-echo peer `s` come back into CUDA memory, each checked
  /// byte for byte (the peer echoes `sizes` in order).
  void echo_into_cuda(PeerSession& s, const std::vector<uint64_t>& sizes) {
    const size_t cap = 5 * kChunk + 64;
    std::byte* dev = allocate(cap);
    ASSERT_NE(dev, nullptr);
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE(fmt::format("message {} of {} bytes", i, sizes[i]));
      const auto data = stream_bytes(sizes[i], i + 1);
      ASSERT_TRUE(s.ep->send(std::span(data), Tag{100 + i}).wait(60s).is_ok());
      auto line = s.peer->read_line(60s);
      ASSERT_TRUE(line);
      EXPECT_EQ(*line, "RECV " + std::to_string(i) + " ok " + hex64(XXH3_64bits(data.data(), data.size())));
      Request r = s.ep->recv(std::span(dev, cap), Tag{200 + i});
      const Status got = r.wait(60s);
      ASSERT_TRUE(got.is_ok()) << describe(got);
      EXPECT_EQ(r.bytes(), sizes[i]);
      const auto back = read(dev, cap);
      EXPECT_TRUE(std::equal(data.begin(), data.end(), back.begin())) << "the message differs in CUDA memory";
    }
  }

  MemoryDomain* cuda_ = nullptr;
  std::vector<void*> allocations_;
};

TEST_F(DevmemRxEndpointCuda, MessagesFromAPeerProcessArePlacedInCudaMemoryFromRxqsBuffer) {
  RxqStandin rxq;
  ASSERT_TRUE(rxq.ready());
  StandinRx standin(rxq.socket());
  ASSERT_NE(standin.nic.dmabuf, nullptr);
  auto ctx = context(rxq.socket());
  ASSERT_TRUE(ctx);
  // A chunk and one, several chunks, and a 1-byte message (eager, staged).
  const std::vector<uint64_t> sizes = {kChunk + 1, 5 * kChunk + 3, 1};
  PeerSession s = start_echo_peer(*ctx, sizes);
  ASSERT_TRUE(s.ep);
  const uint64_t handshake = standin.nic.bytes;
  echo_into_cuda(s, sizes);
  const EndpointStats st = s.ep->stats();
  EXPECT_EQ(st.device_path, "staging") << st.device_path_reason;  // the last, eager one
  EXPECT_NE(st.device_path_reason.find("copied to cuda memory from there"), std::string::npos) << st.device_path_reason;
  EXPECT_EQ(st.devmem_transfers, 2u);
  EXPECT_EQ(st.staged_transfers, 1u);
  EXPECT_EQ(standin.nic.bytes - handshake, (kChunk + 1) + (5 * kChunk + 3));
  EXPECT_EQ(standin.nic.tokens_out(), 0u);
  finish_echo_session(s);
}

TEST_F(DevmemRxEndpointCuda, AReceiveAreaOfItsOwnInCudaMemoryTakesEveryByteAndScattersThere) {
  // TCPX's model with CUDA memory: the endpoint's receive area is a cuMemAlloc exported
  // as a dmabuf; the stand-in NIC writes into it by the domain's copies (a NIC would by
  // DMA), and device receives are scattered within the GPU by the unpack kernel.
  RxqStandin rxq(/*client_queues=*/1);
  ASSERT_TRUE(rxq.ready());
  AreaStandin standin(cuda_);
  // A driver that exports no dmabufs (the emulated one) cannot give an area: then the
  // endpoint says so and stages, which is checked instead.
  std::byte* probe = allocate(4096);
  ASSERT_NE(probe, nullptr);
  auto probed = cuda_->export_dmabuf(probe, 4096);
  if (probed) ::close(probed->fd);
  const bool exports = probed.is_ok();
  auto ctx = area_context(rxq.socket(), "4M", *cuda_);
  ASSERT_TRUE(ctx);
  const std::vector<uint64_t> sizes = {kChunk + 1, 5 * kChunk + 3};
  PeerSession s = start_echo_peer(*ctx, sizes);
  ASSERT_TRUE(s.ep);
  if (exports) {
    ASSERT_NE(standin.area, nullptr) << "the endpoint bound no area";
    EXPECT_TRUE(cuda_->owns(standin.area, 4 << 20));
  } else {
    EXPECT_EQ(standin.area, nullptr);
  }
  echo_into_cuda(s, sizes);
  const EndpointStats st = s.ep->stats();
  if (exports) {
    EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
    EXPECT_NE(st.device_path_reason.find("its own receive area of 4194304 bytes of cuda memory"), std::string::npos)
        << st.device_path_reason;
    EXPECT_EQ(st.devmem_transfers, 2u);
    EXPECT_EQ(standin.nic.tokens_out(), 0u);
  } else {
    EXPECT_EQ(st.device_path, "staging") << st.device_path_reason;
    EXPECT_NE(st.device_path_reason.find("REMORA_RXQ_DEVICE_AREA=4194304 of cuda memory: " + probed.status().message()),
              std::string::npos)
        << st.device_path_reason;
    EXPECT_EQ(st.devmem_transfers, 0u);
    EXPECT_EQ(st.staged_transfers, 2u);
  }
  finish_echo_session(s);
}

TEST_F(DevmemRxEndpointCuda, AZcrxAreaInCudaMemoryTakesEveryByteWhereTheDriverExportsItWhole) {
  // io_uring zcrx with its area in CUDA memory (REMORA_DEVICE_PATH=zcrx,
  // REMORA_RXQ_DEVICE_AREA): a cuMemAlloc exported as a dmabuf and registered whole as a
  // dmabuf area; the stand-in NIC writes into it by the domain's copies, device receives
  // are scattered within the GPU. A driver that exports no dmabufs (the emulated one), or
  // not the allocation alone, makes the demanded path refuse the receive with why.
  RxqStandin rxq(/*client_queues=*/1);
  ASSERT_TRUE(rxq.ready());
  ZcrxStandin standin(/*real_kernel=*/false, cuda_);
  constexpr size_t kArea = 4 << 20;
  std::byte* probe = allocate(kArea);
  ASSERT_NE(probe, nullptr);
  auto probed = cuda_->export_dmabuf(probe, kArea);
  bool whole = false;
  if (probed) {
    whole = probed->offset == 0 && ::lseek(probed->fd, 0, SEEK_END) == static_cast<off_t>(kArea);
    ::close(probed->fd);
  }
  std::cout << "[ cuda     ] a 4 MiB allocation exports "
            << (probed ? (whole ? "alone" : "inside a larger dmabuf") : "no dmabuf: " + probed.status().message())
            << "\n";
  std::unique_ptr<Context> ctx = area_context(rxq.socket(), "4M", *cuda_, DevicePathMode::kZcrx);
  ASSERT_TRUE(ctx);
  const std::vector<uint64_t> sizes = {kChunk + 1, 5 * kChunk + 3};
  PeerSession s = start_echo_peer(*ctx, sizes);
  ASSERT_TRUE(s.ep);
  if (whole) {
    ASSERT_NE(standin.device_area, nullptr);
    EXPECT_TRUE(cuda_->owns(standin.device_area, kArea));
    EXPECT_TRUE(standin.nic->registered_dmabuf);
    echo_into_cuda(s, sizes);
    const EndpointStats st = s.ep->stats();
    EXPECT_EQ(st.device_path, "zcrx") << st.device_path_reason;
    EXPECT_NE(st.device_path_reason.find("-byte dmabuf area"), std::string::npos) << st.device_path_reason;
    EXPECT_EQ(st.zcrx_transfers, 2u);
    EXPECT_EQ(standin.nic->bad_refills, 0u);
    finish_echo_session(s);
    return;
  }
  EXPECT_EQ(standin.nic->registered_queue, 0u);  // nothing was registered
  expect_zcrx_receive_refused(s, allocate(kChunk), kChunk,
                              "zcrx: REMORA_RXQ_DEVICE_AREA=4194304 of cuda memory: " +
                                  (probed ? std::string("zcrx takes a whole dmabuf") : probed.status().message()));
}

TEST_F(DevmemRxEndpointCuda, APeersPutIntoACudaRegionAndAGetIntoCudaMemoryArePlacedFromRxqsBuffer) {
  RxqStandin rxq;
  ASSERT_TRUE(rxq.ready());
  StandinRx standin(rxq.socket());
  ASSERT_NE(standin.nic.dmabuf, nullptr);
  auto target = context(rxq.socket());
  ASSERT_TRUE(target);
  auto initiator =
      Context::create(ContextOptions{.streams_per_endpoint = 2, .chunk_bytes = kChunk, .ignore_env = true});
  ASSERT_TRUE(initiator.is_ok()) << describe(initiator.status());
  // The target accepts: its streams are steered; the initiator's are plain.
  Pair p = make_pair_in_process(std::move(target), std::move(*initiator));
  ASSERT_TRUE(p.ea && p.eb);
  const uint64_t len = 4 * kChunk + 11;
  std::byte* mem = allocate(len);
  ASSERT_NE(mem, nullptr);
  auto region = p.a->register_memory(mem, len, Access::kRemoteWrite);
  ASSERT_TRUE(region.is_ok()) << describe(region.status());

  // The initiator's chunked put at offset 3, with a notification after it.
  const auto data = stream_bytes(len - 8, 6);
  const Status put = p.eb->put(std::span(data), region->remote_key(), 3, PutOptions{.notify = 42}).wait(60s);
  ASSERT_TRUE(put.is_ok()) << describe(put);
  auto n = p.ea->wait_notification(60s);
  ASSERT_TRUE(n.is_ok()) << describe(n.status());
  EXPECT_EQ(n->value, 42u);
  auto expect = std::vector<std::byte>(len, std::byte{0xCD});
  std::copy(data.begin(), data.end(), expect.begin() + 3);
  EXPECT_TRUE(read(mem, len) == expect) << "the put differs in CUDA memory, or bytes around it changed";
  EXPECT_EQ(p.ea->stats().devmem_transfers, 1u) << p.ea->stats().device_path_reason;

  // The target gets from the initiator's host memory into CUDA memory, at an offset.
  const auto source = stream_bytes(3 * kChunk + 17, 8);
  auto src_region = p.b->register_memory(const_cast<std::byte*>(source.data()), source.size(), Access::kRemoteRead);
  ASSERT_TRUE(src_region.is_ok()) << describe(src_region.status());
  std::byte* dst = allocate(source.size());
  ASSERT_NE(dst, nullptr);
  const Status got = p.ea->get(std::span(dst, source.size() - 9), src_region->remote_key(), 9).wait(60s);
  ASSERT_TRUE(got.is_ok()) << describe(got);
  const auto back = read(dst, source.size());
  EXPECT_TRUE(std::equal(source.begin() + 9, source.end(), back.begin())) << "the get differs in CUDA memory";
  EXPECT_TRUE(std::all_of(back.end() - 9, back.end(), [](std::byte b) { return b == std::byte{0xCD}; }));
  const EndpointStats st = p.ea->stats();
  EXPECT_EQ(st.device_path, "devmem") << st.device_path_reason;
  EXPECT_NE(st.device_path_reason.find("devmem RX into cuda memory"), std::string::npos) << st.device_path_reason;
  EXPECT_EQ(st.devmem_transfers, 2u);
  EXPECT_GE(standin.nic.bytes, (len - 8) + (source.size() - 9));
  EXPECT_EQ(standin.nic.tokens_out(), 0u);
  region->deregister();
  reset(p);
}

}  // namespace
}  // namespace remora::itest
