// An outside client: uses an installed remora through its public headers only, the way
// a new user would after reading the README and docs/, and checks what those promise
// across every size class and every refusal: two contexts over loopback, tagged
// messages and one-sided puts and gets of every size, compared byte for byte; every
// reason a target refuses a put or a get, at inline, chunked and larger-than-socket-
// buffer sizes, each answered with its code, the target's memory untouched and the
// endpoint still usable; zero-length accesses at the window's edge; a dead peer; and
// device memory (the test device of remora/testing/test_device.h) sent and received at
// every size, a failed device copy, and the refusal of puts from device memory; device
// receives without the `remora rxq` that devmem receive needs (staged, or refused when
// demanded, with the reason); and every collective family on device memory between two communicators made with
// Communicator::init, across the sizes where staging goes from whole to segmented; and a
// dmabuf range (remora/dmabuf.h) as a region and a message buffer; a put source sent
// again and again collapsed into huge pages.
// Every wait has a bound, and a wait that runs out is a failure: a hang here is a bug.
//
// Prints "outside-client: N checks, 0 failed" and exits 0, or lists what failed.
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <remora/remora.h>
#include <remora/testing/test_device.h>

using namespace std::chrono_literals;

namespace {

constexpr auto kBound = 60s;  // no single operation here may take longer
int checks = 0;
int failures = 0;

void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

/// The operation ended within the bound with `want`.
void expect_code(const remora::Request& r, remora::StatusCode want, const std::string& what) {
  const remora::Status s = r.wait(kBound);
  check(s.code() == want, what + ": want " + std::string(remora::to_string(want)) + ", got " + s.to_string());
}

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

struct Peers {
  std::unique_ptr<remora::Context> target_ctx, init_ctx;
  std::unique_ptr<remora::Listener> listener;
  std::shared_ptr<remora::Endpoint> target, init;
};

bool connect(Peers& p, remora::MemoryDomain* target_device = nullptr, remora::MemoryDomain* init_device = nullptr) {
  auto t = remora::Context::create();
  auto i = remora::Context::create();
  if (!t || !i) {
    check(false, "Context::create: " + (t ? i.status() : t.status()).to_string());
    return false;
  }
  p.target_ctx = std::move(t).value();
  p.init_ctx = std::move(i).value();
  if (target_device != nullptr) check(p.target_ctx->add_memory_domain(*target_device).is_ok(), "add_memory_domain");
  if (init_device != nullptr) check(p.init_ctx->add_memory_domain(*init_device).is_ok(), "add_memory_domain");
  auto l = p.target_ctx->listen("127.0.0.1:0");
  if (!l) {
    check(false, "listen: " + l.status().to_string());
    return false;
  }
  p.listener = std::move(l).value();
  auto c = p.init_ctx->connect("127.0.0.1:" + std::to_string(p.listener->port()), 10s);
  auto a = p.listener->accept(10s);
  if (!c || !a) {
    check(false, "connect/accept: " + (c ? a.status() : c.status()).to_string());
    return false;
  }
  p.init = std::move(c).value();
  p.target = std::move(a).value();
  return true;
}

/// After a refusal: a small put and get and a message still work.
void expect_usable(Peers& p, remora::Region& scratch, const std::string& after) {
  const auto data = pattern(700, checks);
  const remora::RemoteKey key = scratch.remote_key();
  expect_code(p.init->put(data, key, 64), remora::StatusCode::kOk, "put after " + after);
  std::vector<std::byte> back(data.size());
  expect_code(p.init->get(back, key, 64), remora::StatusCode::kOk, "get after " + after);
  check(back == data, "get after " + after + " returned the bytes put");
  std::vector<std::byte> msg(100);
  remora::Request rx = p.target->recv(msg, remora::Tag{99});
  expect_code(p.init->send(std::span(data).first(100), remora::Tag{99}), remora::StatusCode::kOk,
              "send after " + after);
  expect_code(rx, remora::StatusCode::kOk, "recv after " + after);
  check(std::equal(msg.begin(), msg.end(), data.begin()), "message after " + after + " intact");
}

// Messages and one-sided transfers of every size class, compared byte for byte.
void every_size(Peers& p) {
  const size_t sizes[] = {0, 1, 4095, 16383, 16384, 16385, 524287, 524288, 524289, (3 << 20) + 1, (40 << 20) + 3};
  const size_t largest = sizes[std::size(sizes) - 1];
  std::vector<std::byte> window(largest + 64);
  auto region = p.target_ctx->register_memory(window.data(), window.size(),
                                              remora::Access::kRemoteRead | remora::Access::kRemoteWrite);
  if (!region) return check(false, "register: " + region.status().to_string());
  const remora::RemoteKey key = region->remote_key();
  for (size_t n : sizes) {
    const std::string at = std::to_string(n) + " bytes";
    const auto data = pattern(n, n + 1);
    std::vector<std::byte> in(n + 8, std::byte{0x77});
    remora::Request rx = p.target->recv(std::span(in).first(n), remora::Tag{1});
    expect_code(p.init->send(data, remora::Tag{1}), remora::StatusCode::kOk, "send of " + at);
    expect_code(rx, remora::StatusCode::kOk, "recv of " + at);
    check(rx.bytes() == n && std::equal(data.begin(), data.end(), in.begin()), "message of " + at + " intact");
    check(
        std::all_of(in.begin() + static_cast<ptrdiff_t>(n), in.end(), [](std::byte b) { return b == std::byte{0x77}; }),
        "recv of " + at + " wrote past the message");

    expect_code(p.init->put(data, key, 32), remora::StatusCode::kOk, "put of " + at);
    check(std::equal(data.begin(), data.end(), window.begin() + 32), "put of " + at + " landed");
    std::vector<std::byte> back(n);
    expect_code(p.init->get(back, key, 32), remora::StatusCode::kOk, "get of " + at);
    check(back == data, "get of " + at + " intact");
  }
}

// Memory sent again and again to a peer on this host (same-host pulls, the default) is
// collapsed into huge pages after its second send (REMORA_PULL_HUGEPAGES,
// docs/protocol.md): the same 8 MiB source on 2 MiB boundaries put three times with new
// contents lands intact each time, and the initiator counts its four frames (none where
// the kernel's THP mode is "never", or the environment turned it off).
void pulled_memory_on_huge_pages(Peers& p) {
  constexpr size_t kFrame = size_t{2} << 20, kSize = 4 * kFrame;
  void* map = ::mmap(nullptr, kSize + kFrame, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return check(false, "mmap of the put source");
  auto* source = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(map) + kFrame - 1) & ~uintptr_t{kFrame - 1});
  std::vector<std::byte> window(kSize);
  auto region = p.target_ctx->register_memory(window.data(), window.size(), remora::Access::kRemoteWrite);
  if (!region) {
    ::munmap(map, kSize + kFrame);
    return check(false, "register: " + region.status().to_string());
  }
  const uint64_t promoted = p.init->stats().huge_pages_promoted;
  for (uint64_t round = 0; round < 3; ++round) {
    const auto data = pattern(kSize, 500 + round);
    std::memcpy(source, data.data(), kSize);
    expect_code(p.init->put(std::span<const std::byte>(source, kSize), region->remote_key(), 0),
                remora::StatusCode::kOk, "put of the same source, round " + std::to_string(round));
    check(window == data, "put of the same source landed, round " + std::to_string(round));
  }
  bool never = true;
  if (FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r")) {
    char text[128] = {};
    const size_t n = std::fread(text, 1, sizeof text - 1, f);
    never = std::string(text, n).find("[never]") != std::string::npos;
    std::fclose(f);
  }
  const char* env = std::getenv("REMORA_PULL_HUGEPAGES");
  const bool off = never || (env != nullptr && std::string(env) == "off");
  const bool pulled = p.target->stats().same_host_reason.empty();
  check(p.init->stats().huge_pages_promoted - promoted == (pulled && !off ? 4u : 0u),
        "frames of a source put again and again collapsed into huge pages: " +
            std::to_string(p.init->stats().huge_pages_promoted - promoted));
  ::munmap(map, kSize + kFrame);
}

// Every refusal, at every size class, for puts and gets.
void every_refusal(Peers& p) {
  constexpr size_t kRegion = 48 << 20;
  std::vector<std::byte> memory = pattern(kRegion, 5);
  const std::vector<std::byte> original = memory;
  auto region = p.target_ctx->register_memory(memory.data(), memory.size(),
                                              remora::Access::kRemoteRead | remora::Access::kRemoteWrite);
  std::vector<std::byte> other(1 << 20);
  auto usable = p.target_ctx->register_memory(other.data(), other.size(),
                                              remora::Access::kRemoteRead | remora::Access::kRemoteWrite);
  if (!region || !usable) return check(false, "register for refusals");
  const remora::RemoteKey key = region->remote_key();
  const auto read_only = region->remote_key(0, kRegion, remora::Access::kRemoteRead).value();
  const auto write_only = region->remote_key(0, kRegion, remora::Access::kRemoteWrite).value();
  remora::RemoteKey stale;
  {
    std::vector<std::byte> gone_memory(64 << 10);
    auto gone = p.target_ctx->register_memory(gone_memory.data(), gone_memory.size(),
                                              remora::Access::kRemoteRead | remora::Access::kRemoteWrite);
    if (!gone) return check(false, "register the region that goes");
    stale = gone->remote_key();
  }  // deregistered here

  struct Reason {
    const char* name;
    remora::StatusCode want;
  };
  const size_t sizes[] = {100, 300 * 1024 + 5, (40 << 20) + 7};  // inline, a chunk, beyond the socket buffers
  for (size_t n : sizes) {
    const auto data = pattern(n, 11);
    std::vector<std::byte> sink(n, std::byte{0x3C});
    const auto untouched = sink;
    auto both = [&](const char* why, const remora::RemoteKey& put_key, const remora::RemoteKey& get_key,
                    uint64_t offset, remora::StatusCode want) {
      const std::string at = std::string(why) + ", " + std::to_string(n) + " bytes";
      expect_code(p.init->put(data, put_key, offset), want, "put refused: " + at);
      check(memory == original, "target memory untouched after the refused put: " + at);
      expect_usable(p, *usable, "a refused put (" + at + ")");
      expect_code(p.init->get(sink, get_key, offset), want, "get refused: " + at);
      check(sink == untouched, "local buffer untouched after the refused get: " + at);
      expect_usable(p, *usable, "a refused get (" + at + ")");
    };
    both("out of range", key, key, kRegion - n / 2, remora::StatusCode::kOutOfRange);
    both("missing right", read_only, write_only, 0, remora::StatusCode::kAccessDenied);
    remora::RemoteKey forged = key;
    forged.secret ^= 1;
    both("forged secret", forged, forged, 0, remora::StatusCode::kInvalidKey);
    both("stale key", stale, stale, 0, remora::StatusCode::kInvalidKey);
    remora::RemoteKey moved = read_only;
    moved.offset += 4096;
    both("tampered offset", moved, moved, 0, remora::StatusCode::kInvalidKey);
    remora::RemoteKey widened = key;
    widened.length += uint64_t{1} << 30;
    both("tampered length", widened, widened, kRegion, remora::StatusCode::kInvalidKey);
  }
  // flush reports the first refused put since the previous flush: the first put
  // refused above was out of range; after that flush, the next refused one.
  expect_code(p.init->flush(), remora::StatusCode::kOutOfRange, "flush after the refusals");
  expect_code(p.init->put(std::span(original).first(64), read_only, 0), remora::StatusCode::kAccessDenied,
              "put with a read-only key");
  expect_code(p.init->flush(), remora::StatusCode::kAccessDenied, "flush after a refused put");
  expect_code(p.init->flush(), remora::StatusCode::kOk, "a second flush");
}

// Zero-length accesses: fine anywhere from 0 to the window's end, out of range past it.
void zero_length(Peers& p) {
  std::vector<std::byte> memory(8192);
  auto region = p.target_ctx->register_memory(memory.data(), memory.size(),
                                              remora::Access::kRemoteRead | remora::Access::kRemoteWrite);
  if (!region) return check(false, "register for zero-length");
  const auto window = region->remote_key(1024, 2048, remora::Access::kRemoteRead | remora::Access::kRemoteWrite);
  if (!window) return check(false, "window key: " + window.status().to_string());
  const std::span<const std::byte> none;
  for (uint64_t off : {uint64_t{0}, uint64_t{1}, uint64_t{2048}}) {
    expect_code(p.init->put(none, *window, off), remora::StatusCode::kOk, "zero-length put at " + std::to_string(off));
    expect_code(p.init->get(std::span<std::byte>(), *window, off), remora::StatusCode::kOk,
                "zero-length get at " + std::to_string(off));
  }
  expect_code(p.init->put(none, *window, 2049), remora::StatusCode::kOutOfRange, "zero-length put past the window");
  expect_code(p.init->get(std::span<std::byte>(), *window, 2049), remora::StatusCode::kOutOfRange,
              "zero-length get past the window");
}

// A batch of puts into two regions with one notification (the KV-cache pattern of the
// README), then a get batch reading them back, and a batch whose bad item fails it.
void batches(Peers& p) {
  std::vector<std::byte> a(1 << 20), b(1 << 20);
  const auto rights = remora::Access::kRemoteRead | remora::Access::kRemoteWrite;
  auto ra = p.target_ctx->register_memory(a.data(), a.size(), rights);
  auto rb = p.target_ctx->register_memory(b.data(), b.size(), rights);
  if (!ra || !rb) return check(false, "register for batches");
  auto x = pattern(300000, 11), y = pattern(100, 12);
  std::vector<remora::TransferItem> items = {{x, ra->remote_key(), 4096}, {y, rb->remote_key(), 0}};
  expect_code(p.init->put_batch(items, {.notify = 77}), remora::StatusCode::kOk, "put_batch");
  auto n = p.target->wait_notification(kBound);
  check(n.is_ok() && n->value == 77 && n->region == rb->id(), "put_batch's one notification names the last item");
  check(std::equal(x.begin(), x.end(), a.begin() + 4096) && std::equal(y.begin(), y.end(), b.begin()),
        "put_batch placed every item");
  std::vector<std::byte> bx(x.size()), by(y.size());
  std::vector<remora::TransferItem> back = {{bx, ra->remote_key(), 4096}, {by, rb->remote_key(), 0}};
  expect_code(p.init->get_batch(back), remora::StatusCode::kOk, "get_batch");
  check(bx == x && by == y, "get_batch read every item");
  std::vector<remora::TransferItem> bad = {{y, rb->remote_key(), b.size()}};
  expect_code(p.init->put_batch(bad, {.notify = 1}), remora::StatusCode::kOutOfRange, "put_batch with a bad item");
  check(!p.target->poll_notification().has_value(), "a failed put_batch notifies nobody");
}

// A peer that goes away fails what is outstanding, within the bound, and later calls.
void dead_peer(Peers& p) {
  std::vector<std::byte> big(64 << 20);
  remora::Request rx = p.init->recv(big, remora::Tag{5});  // nobody will send it
  p.target->abort();
  expect_code(rx, remora::StatusCode::kPeerFailed, "a posted recv when the peer aborts");
  expect_code(p.init->send(std::span(big).first(10), remora::Tag{5}), remora::StatusCode::kPeerFailed,
              "a send after the peer aborted");
  check(p.init->failed(), "the endpoint reports failed() after the peer aborted");
}

// Device memory, as docs/device-memory.md shows it: each side's test device added to
// its context, messages of every size from and into device memory (and mixed with host
// memory) compared byte for byte, a device copy that fails fails that message only, and
// puts and gets from and into device memory of every size, compared byte for byte.
void device_memory() {
  auto tdev = remora::testing::TestDeviceDomain::create();
  auto idev = remora::testing::TestDeviceDomain::create();
  if (!tdev || !idev) return check(false, "TestDeviceDomain::create");
  Peers p;  // after the domains: they outlive the contexts
  if (!connect(p, tdev->get(), idev->get())) return;
  remora::testing::TestDeviceDomain& td = **tdev;
  remora::testing::TestDeviceDomain& id = **idev;
  const size_t sizes[] = {0, 1, 16383, 16384, 16385, 524287, 524288, 524289, (3 << 20) + 1, (40 << 20) + 3};
  const size_t largest = sizes[std::size(sizes) - 1];
  std::byte* send_dev = id.allocate(largest).value();
  std::byte* recv_dev = td.allocate(largest).value();
  std::vector<std::byte> host_in(largest);
  for (size_t n : sizes) {
    const std::string at = std::to_string(n) + " bytes";
    const auto data = pattern(n, n + 7);
    check(id.write(send_dev, data.data(), n).is_ok(), "write the test device");
    // device -> device
    remora::Request rx = p.target->recv(std::span(recv_dev, n), remora::Tag{3});
    expect_code(p.init->send(std::span<const std::byte>(send_dev, n), remora::Tag{3}), remora::StatusCode::kOk,
                "device send of " + at);
    expect_code(rx, remora::StatusCode::kOk, "device recv of " + at);
    std::vector<std::byte> got(n);
    check(td.read(got.data(), recv_dev, n).is_ok() && got == data, "device to device message of " + at + " intact");
    // device -> host
    remora::Request rx2 = p.target->recv(std::span(host_in).first(n), remora::Tag{4});
    expect_code(p.init->send(std::span<const std::byte>(send_dev, n), remora::Tag{4}), remora::StatusCode::kOk,
                "device send to host of " + at);
    expect_code(rx2, remora::StatusCode::kOk, "host recv of " + at);
    check(std::equal(data.begin(), data.end(), host_in.begin()), "device to host message of " + at + " intact");
  }
  // A failed copy into the receiver's device fails that receive, and the next one works.
  const auto data = pattern(3 << 20, 5);
  check(id.write(send_dev, data.data(), data.size()).is_ok(), "write the test device");
  td.fail_copies(recv_dev, 1);
  remora::Request bad = p.target->recv(std::span(recv_dev, data.size()), remora::Tag{6});
  expect_code(p.init->send(std::span<const std::byte>(send_dev, data.size()), remora::Tag{6}), remora::StatusCode::kOk,
              "send whose receiver's device copy fails");
  expect_code(bad, remora::StatusCode::kDeviceFailed, "recv whose device copy fails");
  td.clear_failures();
  remora::Request good = p.target->recv(std::span(recv_dev, data.size()), remora::Tag{7});
  expect_code(p.init->send(std::span<const std::byte>(send_dev, data.size()), remora::Tag{7}), remora::StatusCode::kOk,
              "send after a failed device copy");
  expect_code(good, remora::StatusCode::kOk, "recv after a failed device copy");
  std::vector<std::byte> got(data.size());
  check(td.read(got.data(), recv_dev, got.size()).is_ok() && got == data, "message after a failed device copy intact");
  // Puts and gets of device memory: staged too, every size class, into and out of a
  // host window of the other side.
  std::vector<std::byte> window(largest);
  auto region = p.target_ctx->register_memory(window.data(), window.size(),
                                              remora::Access::kRemoteWrite | remora::Access::kRemoteRead);
  if (!region) return check(false, "register: " + region.status().to_string());
  for (size_t n : sizes) {
    const std::string at = std::to_string(n) + " bytes";
    const auto bytes = pattern(n, n + 11);
    check(id.write(send_dev, bytes.data(), n).is_ok(), "write the test device");
    expect_code(p.init->put(std::span<const std::byte>(send_dev, n), region->remote_key(), 0), remora::StatusCode::kOk,
                "put from device memory of " + at);
    check(std::equal(bytes.begin(), bytes.end(), window.begin()), "put from device memory of " + at + " intact");
    for (size_t i = 0; i < n; ++i) window[i] = ~window[i];
    expect_code(p.init->get(std::span<std::byte>(send_dev, n), region->remote_key(), 0), remora::StatusCode::kOk,
                "get into device memory of " + at);
    std::vector<std::byte> back(n);
    check(id.read(back.data(), send_dev, n).is_ok() && std::equal(back.begin(), back.end(), window.begin()),
          "get into device memory of " + at + " intact");
  }
}

/// A free TCP port on 127.0.0.1 (for the communicators' store, which rank 0 serves).
// Devmem receive needs `remora rxq serve` steering the data streams
// (docs/device-memory.md, REMORA_RXQ_SOCKET). With the variable naming no socket, a
// receive into device memory stages and the endpoint says why; with REMORA_DEVICE_PATH
// =devmem demanded, it is refused with that reason, and host messages go on.
void rxq_unreachable() {
  auto tdev = remora::testing::TestDeviceDomain::create();
  if (!tdev) return check(false, "TestDeviceDomain::create");
  remora::testing::TestDeviceDomain& td = **tdev;
  const std::string socket = "/nonexistent/remora-rxq.sock";
  ::setenv("REMORA_RXQ_SOCKET", socket.c_str(), 1);
  for (const bool demanded : {false, true}) {
    const std::string mode = demanded ? "REMORA_DEVICE_PATH=devmem" : "REMORA_DEVICE_PATH=auto";
    ::setenv("REMORA_DEVICE_PATH", demanded ? "devmem" : "auto", 1);
    Peers p;
    if (!connect(p, &td)) continue;
    const size_t n = 300 * 1024;
    const auto data = pattern(n, demanded ? 11 : 12);
    auto recv_dev = td.allocate(n);
    if (!recv_dev) return check(false, "allocate the test device");
    remora::Request rx = p.target->recv(std::span(*recv_dev, n), remora::Tag{1});
    remora::Request tx = p.init->send(std::span(data), remora::Tag{1});
    const remora::EndpointStats st = p.target->stats();
    check(st.device_path_reason.find("is `remora rxq serve --socket " + socket + "` running?") != std::string::npos,
          mode + ": the reason names the unreachable rxq: " + st.device_path_reason);
    if (demanded) {
      expect_code(rx, remora::StatusCode::kUnsupported, mode + ": receive into device memory without rxq");
      check(st.device_path == "refused", mode + ": path refused");
      std::vector<std::byte> host(n);
      expect_code(p.target->recv(std::span(host), remora::Tag{1}), remora::StatusCode::kOk,
                  mode + ": the message still arrives in host memory");
      check(host == data, mode + ": host message intact");
    } else {
      expect_code(rx, remora::StatusCode::kOk, mode + ": receive into device memory without rxq");
      std::vector<std::byte> got(n);
      check(td.read(got.data(), *recv_dev, n).is_ok() && got == data, mode + ": staged message intact");
      check(p.target->stats().device_path == "staging", mode + ": path staging");
    }
    expect_code(tx, remora::StatusCode::kOk, mode + ": send");
  }
  ::unsetenv("REMORA_DEVICE_PATH");
  ::unsetenv("REMORA_RXQ_SOCKET");
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

/// Every collective family on device memory (the test device) between two ranks made
/// with Communicator::init in this process, each result compared with an exact integer
/// reference. With 4 KiB segments (REMORA_COLL_DEVICE_SEGMENT, read when a communicator
/// is made) the sizes cover staging whole and segment by segment (docs/device-memory.md).
void device_collectives() {
  constexpr int kRanks = 2;
  ::setenv("REMORA_COLL_DEVICE_SEGMENT", "4K", 1);
  const int port = free_port();
  if (port == 0) return check(false, "a free port for the store");
  const std::string store = "127.0.0.1:" + std::to_string(port);
  const auto val = [](int q, size_t i) { return static_cast<int32_t>(q * 1000003 + static_cast<int>(i % 9973)); };
  std::vector<std::vector<std::string>> failed(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto& fails = failed[static_cast<size_t>(r)];
      const auto expect = [&](bool ok, const std::string& what) {
        if (!ok) fails.push_back("rank " + std::to_string(r) + ": " + what);
      };
      auto dev = remora::testing::TestDeviceDomain::create();
      if (!dev) return expect(false, "TestDeviceDomain::create");
      auto ctx = remora::Context::create();
      if (!ctx) return expect(false, "Context::create: " + ctx.status().to_string());
      expect((*ctx)->add_memory_domain(**dev).is_ok(), "add_memory_domain");
      remora::LaunchInfo launch{.rank = r,
                                .size = kRanks,
                                .local_rank = r,
                                .local_size = kRanks,
                                .launcher = "remora",
                                .store_address = store};
      auto comm = remora::Communicator::init(**ctx, launch, {.timeout = kBound});
      if (!comm) return expect(false, "Communicator::init: " + comm.status().to_string());
      remora::Communicator& c = **comm;
      remora::testing::TestDeviceDomain& d = **dev;
      const auto put = [&](const std::vector<int32_t>& v) {
        auto* p = reinterpret_cast<int32_t*>(d.allocate(std::max<size_t>(v.size(), 1) * 4).value());
        expect(v.empty() || d.write(p, v.data(), v.size() * 4).is_ok(), "write the test device");
        return p;
      };
      const auto get = [&](const int32_t* p, size_t n) {
        std::vector<int32_t> v(n);
        expect(n == 0 || d.read(v.data(), p, n * 4).is_ok(), "read the test device");
        return v;
      };
      const auto ok = [&](const remora::Status& s, const std::string& what) {
        expect(s.is_ok(), what + ": " + s.to_string());
        return s.is_ok();
      };
      // 1024 elements a segment for allreduce, broadcast and scan; 512 of each block
      // for the others: from 4 segments up they are pipelined.
      for (size_t n : {size_t{1}, size_t{1000}, size_t{2048}, size_t{5000}, size_t{100003}}) {
        const std::string at = " of " + std::to_string(n) + " int32";
        std::vector<int32_t> mine(n), sum(n), all, out, in, prefix(n, 0);
        for (size_t i = 0; i < n; ++i) {
          mine[i] = val(r, i);
          sum[i] = val(0, i) + val(1, i);
          for (int q = 0; q <= r; ++q) prefix[i] += val(q, i);
        }
        for (int q = 0; q < kRanks; ++q) {
          for (size_t i = 0; i < n; ++i) {
            all.push_back(val(q, i));
            out.push_back(val(r, i) + q);  // alltoall: block q of rank r's send
            in.push_back(val(q, i) + r);
          }
        }
        int32_t* send = put(mine);
        int32_t* recv = put(std::vector<int32_t>(n, -1));
        if (ok(c.allreduce(send, recv, n, remora::DataType::kInt32, remora::ReduceOp::kSum), "allreduce" + at)) {
          expect(get(recv, n) == sum, "allreduce" + at + " exact");
        }
        int32_t* b = put(r == 1 ? mine : std::vector<int32_t>(n, 0));
        if (ok(c.broadcast(b, n, remora::DataType::kInt32, 1), "broadcast" + at)) {
          std::vector<int32_t> want(n);
          for (size_t i = 0; i < n; ++i) want[i] = val(1, i);
          expect(get(b, n) == want, "broadcast" + at + " exact");
        }
        int32_t* g = put(std::vector<int32_t>(n * kRanks, -1));
        if (ok(c.allgather(send, g, n, remora::DataType::kInt32), "allgather" + at)) {
          expect(get(g, n * kRanks) == all, "allgather" + at + " exact");
        }
        int32_t* rs = put(std::vector<int32_t>(n, -1));
        if (ok(c.reduce_scatter(g, rs, n, remora::DataType::kInt32, remora::ReduceOp::kSum), "reduce_scatter" + at)) {
          std::vector<int32_t> want = mine;
          for (auto& x : want) x *= kRanks;
          expect(get(rs, n) == want, "reduce_scatter" + at + " exact");
        }
        int32_t* as = put(out);
        int32_t* ar = put(std::vector<int32_t>(n * kRanks, -1));
        if (ok(c.alltoall(as, ar, n, remora::DataType::kInt32), "alltoall" + at)) {
          expect(get(ar, n * kRanks) == in, "alltoall" + at + " exact");
        }
        int32_t* ga = put(std::vector<int32_t>(n * kRanks, -1));
        if (ok(c.gather(send, ga, n, remora::DataType::kInt32, 0), "gather" + at)) {
          expect(get(ga, n * kRanks) == (r == 0 ? all : std::vector<int32_t>(n * kRanks, -1)),
                 "gather" + at + " exact");
        }
        int32_t* sc = put(std::vector<int32_t>(n, -1));
        if (ok(c.scatter(g, sc, n, remora::DataType::kInt32, 1), "scatter" + at)) {
          expect(get(sc, n) == mine, "scatter" + at + " exact");
        }
        int32_t* sn = put(std::vector<int32_t>(n, -1));
        if (ok(c.scan(send, sn, n, remora::DataType::kInt32, remora::ReduceOp::kSum), "scan" + at)) {
          expect(get(sn, n) == prefix, "scan" + at + " exact");
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& fails : failed) {
    check(fails.empty(), fails.empty() ? "" : fails.front() + " (and " + std::to_string(fails.size() - 1) + " more)");
  }
}

/// A dmabuf range as memory (remora/dmabuf.h), with a memfd standing in for the dmabuf
/// (no exporter where the tests run): a region of it takes puts of every size class with
/// a notification and serves gets, and messages go from it, every byte read back through
/// the descriptor.
void dmabuf_memory() {
  const int fd = ::memfd_create("outside-client-dmabuf", MFD_CLOEXEC);
  constexpr size_t kBytes = (6 << 20) + 4096;
  if (fd < 0 || ::ftruncate(fd, kBytes) != 0) return check(false, "memfd for the dmabuf stand-in");
  auto mem = remora::DmabufMemory::open(fd, 4096 + 3, kBytes - 4096 - 3);
  if (!mem) return check(false, "DmabufMemory::open: " + mem.status().to_string());
  check((*mem)->mapped() && !(*mem)->is_dmabuf(), "a memfd maps and is not a dmabuf");
  {
    Peers p;  // after the memory: it outlives the contexts
    if (!connect(p, &(*mem)->domain())) return;
    auto region = p.target_ctx->register_memory((*mem)->data(), (*mem)->size(),
                                                remora::Access::kRemoteWrite | remora::Access::kRemoteRead);
    if (!region) return check(false, "register dmabuf memory: " + region.status().to_string());
    for (size_t n : {size_t{1}, size_t{16385}, size_t{524289}, size_t{(5 << 20) + 1}}) {
      const std::string at = std::to_string(n) + " bytes";
      const auto data = pattern(n, n + 11);
      expect_code(p.init->put(std::span(data), region->remote_key(), 5, remora::PutOptions{.notify = n}),
                  remora::StatusCode::kOk, "put into dmabuf memory of " + at);
      auto note = p.target->wait_notification(kBound);
      check(note.is_ok() && note->value == n, "notification after the put of " + at);
      std::vector<std::byte> in(n);
      check(::pread(fd, in.data(), n, 4096 + 3 + 5) == static_cast<ssize_t>(n) && in == data,
            "put of " + at + " is in the descriptor");
      std::vector<std::byte> back(n);
      expect_code(p.init->get(std::span(back), region->remote_key(), 5), remora::StatusCode::kOk,
                  "get from dmabuf memory of " + at);
      check(back == data, "get of " + at + " intact");
      std::vector<std::byte> msg(n);
      remora::Request rx = p.init->recv(std::span(msg), remora::Tag{9});
      expect_code(p.target->send(std::span<const std::byte>((*mem)->data() + 5, n), remora::Tag{9}),
                  remora::StatusCode::kOk, "send from dmabuf memory of " + at);
      expect_code(rx, remora::StatusCode::kOk, "receive from dmabuf memory of " + at);
      check(msg == data, "message from dmabuf memory of " + at + " intact");
    }
  }
  ::close(fd);
}

}  // namespace

int main() {
  Peers p;
  if (connect(p)) {
    every_size(p);
    pulled_memory_on_huge_pages(p);
    every_refusal(p);
    zero_length(p);
    batches(p);
    dead_peer(p);
  }
  device_memory();
  dmabuf_memory();
  rxq_unreachable();
  device_collectives();
  std::printf("outside-client: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
