// tests/nccl/bench.cc — the harness as a benchmark: isend/irecv bandwidth and latency
// through the plugin (one NCCL connection each way), against a reference transport built
// like NCCL's own socket transport, measured by the same program:
//
//   reference: K TCP sockets per connection; each message is cut into K equal parts (no
//   part under 64 KiB, NCCL's MIN_CHUNKSIZE, so small messages use fewer sockets), part i
//   goes over socket i on its own helper thread, and a message is complete when every
//   part is. Each socket carries a fixed share, so the slowest socket sets the pace.
//   plugin:    libnccl-net-remora.so with REMORA_STREAMS=K data streams per connection
//              (chunks go to whichever stream has room: dynamic balancing).
//
//   harness bench-recv --transport plugin|reference --plugin P --streams K --sizes a,b --iters N
//                      [--sample-mib M]   (bytes per bandwidth sample, 256 MiB by default)
//   harness bench-send --transport ... --handle HEX | --address HOST:PORT
// The receiver prints "HANDLE <hex>" (plugin) or "ADDRESS host:port" (reference); the
// sender then prints "PEER <hex>" (plugin: its own listen handle for the way back, which
// the driver writes to the receiver's stdin), "WARM" after a warm-up, waits for a line
// on stdin (the driver sets up tc meanwhile), and prints one "RESULT" line per size:
//   RESULT <transport> <bytes> <MB/s> <one-way latency µs or -> 
// bench/nccl_compare.py drives pairs of runs in network namespaces.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net_abi.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(2);
}

struct BenchOptions {
  bool send = false;
  std::string transport = "plugin", plugin, handle, address;
  int streams = 4;
  long iters = 16;
  long sample_mib = 256;  // bytes per bandwidth sample (both sides must agree)
  std::vector<size_t> sizes{4096, 65536, 1048576, 4194304, 16777216};
};

BenchOptions parse_bench(int argc, char** argv) {
  BenchOptions o;
  o.send = std::string(argv[1]) == "bench-send";
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--transport") o.transport = v;
    else if (k == "--plugin") o.plugin = v;
    else if (k == "--handle") o.handle = v;
    else if (k == "--address") o.address = v;
    else if (k == "--streams") o.streams = std::atoi(v.c_str());
    else if (k == "--iters") o.iters = std::atol(v.c_str());
    else if (k == "--sample-mib") o.sample_mib = std::max(1L, std::atol(v.c_str()));
    else if (k == "--sizes") {
      o.sizes.clear();
      for (size_t at = 0; at < v.size();) {
        size_t comma = v.find(',', at);
        o.sizes.push_back(std::strtoull(v.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma == std::string::npos ? v.size() : comma + 1;
      }
    } else fail("unknown option " + k);
  }
  return o;
}

std::string read_stdin_line() {
  char line[512];
  if (std::fgets(line, sizeof line, stdin) == nullptr) fail("stdin closed");
  std::string s(line);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

/// How many messages of `size` make one bandwidth sample (about `sample_mib` MiB, at
/// least 4, at most iters * 64).
long count_for(size_t size, long iters, long sample_mib) {
  long n = static_cast<long>((static_cast<unsigned long long>(sample_mib) << 20) / std::max<size_t>(size, 1));
  return std::clamp(n, 4L, std::max(4L, iters * 64));
}
bool wants_latency(size_t size) { return size <= (1u << 20); }

/// One direction of messaging, whichever transport.
struct Link {
  virtual ~Link() = default;
  /// Sends (or receives) `count` messages of `size` bytes from/into buf, streaming.
  virtual void stream(bool send, std::byte* buf, size_t size, long count) = 0;
};

// --- reference: NCCL's socket transport's design ---------------------------------------

constexpr size_t kMinChunk = 64 * 1024;

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void io_all(int fd, bool send, std::byte* p, size_t n) {
  while (n > 0) {
    ssize_t r = send ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      fail(std::string("reference socket: ") + (r == 0 ? "closed" : std::strerror(errno)));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
}

/// K sockets, a helper thread per socket; a job is "move part i of each of `count`
/// messages"; the caller waits until every helper finished it.
class RefLink : public Link {
 public:
  explicit RefLink(std::vector<int> fds) : fds_(std::move(fds)) {
    for (size_t i = 0; i < fds_.size(); ++i) helpers_.emplace_back([this, i] { helper(i); });
  }
  ~RefLink() override {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
      ++job_;
    }
    cv_.notify_all();
    for (auto& t : helpers_) t.join();
    for (int fd : fds_) close(fd);
  }
  void stream(bool send, std::byte* buf, size_t size, long count) override {
    std::unique_lock lock(mu_);
    send_ = send;
    buf_ = buf;
    size_ = size;
    count_ = count;
    done_ = 0;
    ++job_;
    cv_.notify_all();
    done_cv_.wait(lock, [&] { return done_ == fds_.size(); });
  }

 private:
  void helper(size_t i) {
    uint64_t seen = 0;
    for (;;) {
      bool send;
      std::byte* buf;
      size_t size;
      long count;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return job_ != seen; });
        seen = job_;
        if (quit_) return;
        send = send_;
        buf = buf_;
        size = size_;
        count = count_;
      }
      // NCCL's split: parts of max(64 KiB, size/K), so small messages use fewer sockets.
      size_t part = std::max(kMinChunk, (size + fds_.size() - 1) / fds_.size());
      size_t begin = std::min(size, i * part), end = std::min(size, begin + part);
      if (size == 0 && i == 0) end = 0;
      for (long m = 0; m < count; ++m) {
        if (end > begin) io_all(fds_[i], send, buf + begin, end - begin);
        if (size == 0 && i == 0) {  // a zero-byte message still travels: one header byte
          std::byte b{};
          io_all(fds_[0], send, &b, 1);
        }
      }
      std::lock_guard lock(mu_);
      if (++done_ == fds_.size()) done_cv_.notify_all();
    }
  }

  std::vector<int> fds_;
  std::vector<std::thread> helpers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  uint64_t job_ = 0;
  bool quit_ = false, send_ = false;
  std::byte* buf_ = nullptr;
  size_t size_ = 0, done_ = 0;
  long count_ = 0;
};

// --- plugin ------------------------------------------------------------------------------

const ncclNet_v12_t* g_net = nullptr;

void quiet_log(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN && std::getenv("NCCL_DEBUG") == nullptr) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
}

class PluginLink : public Link {
 public:
  PluginLink(void* comm, bool sender) : comm_(comm), sender_(sender) {}
  ~PluginLink() override {
    if (sender_) g_net->closeSend(comm_);
    else g_net->closeRecv(comm_);
  }
  void stream(bool send, std::byte* buf, size_t size, long count) override {
    if (send != sender_) fail("plugin connections are one-way");
    constexpr int kWindow = 8;  // NCCL_STEPS: what NCCL's proxy keeps in flight per connection
    std::vector<void*> inflight;
    long posted = 0, completed = 0;
    while (completed < count) {
      if (posted < count && inflight.size() < kWindow) {
        void* req = nullptr;
        ncclResult_t r;
        if (send) {
          r = g_net->isend(comm_, buf, size, 0, nullptr, nullptr, &req);
        } else {
          void* data[1] = {buf};
          size_t sz[1] = {size};
          int tag[1] = {0};
          void* mh[1] = {nullptr};
          r = g_net->irecv(comm_, 1, data, sz, tag, mh, nullptr, &req);
        }
        if (r != ncclSuccess) fail("isend/irecv");
        if (req != nullptr) {
          inflight.push_back(req);
          ++posted;
          continue;
        }
      }
      int done = 0;
      if (g_net->test(inflight.front(), &done, nullptr) != ncclSuccess) fail("test");
      if (done) {
        inflight.erase(inflight.begin());
        ++completed;
      } else {
        sched_yield();  // as NCCL's proxy thread does when a pass over its operations made no progress
      }
    }
  }

 private:
  void* comm_;
  bool sender_;
};

std::string hex(const unsigned char* p, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", p[i]);
    s += b;
  }
  return s;
}
void unhex(const std::string& s, unsigned char* out) {
  if (s.size() != 2 * NCCL_NET_HANDLE_MAXSIZE) fail("bad handle");
  for (size_t i = 0; i < NCCL_NET_HANDLE_MAXSIZE; ++i) out[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
}

/// Sets up the plugin and both connections (ours out, the peer's back).
std::pair<std::unique_ptr<Link>, std::unique_ptr<Link>> plugin_links(const BenchOptions& o) {
  void* lib = dlopen(o.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) fail(std::string("dlopen: ") + dlerror());
  g_net = static_cast<const ncclNet_v12_t*>(dlsym(lib, "ncclNetPlugin_v12"));
  if (g_net == nullptr) fail("no ncclNetPlugin_v12");
  void* ctx = nullptr;
  ncclNetCommConfig_v12_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  if (g_net->init(&ctx, 1, &cfg, quiet_log, nullptr) != ncclSuccess) fail("init");
  unsigned char mine[NCCL_NET_HANDLE_MAXSIZE] = {}, theirs[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lcomm = nullptr;
  if (g_net->listen(ctx, 0, mine, &lcomm) != ncclSuccess) fail("listen");
  if (o.send) {
    unhex(o.handle, theirs);
    std::printf("PEER %s\n", hex(mine, sizeof mine).c_str());
  } else {
    std::printf("HANDLE %s\n", hex(mine, sizeof mine).c_str());
    std::fflush(stdout);
    std::string line = read_stdin_line();
    if (!line.starts_with("PEER ")) fail("expected PEER");
    unhex(line.substr(5), theirs);
  }
  std::fflush(stdout);
  void *scomm = nullptr, *rcomm = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (scomm == nullptr || rcomm == nullptr) {
    if (scomm == nullptr && g_net->connect(ctx, 0, theirs, &scomm, nullptr) != ncclSuccess) fail("connect");
    if (rcomm == nullptr && g_net->accept(lcomm, &rcomm, nullptr) != ncclSuccess) fail("accept");
    if (Clock::now() > deadline) fail("connection setup timed out");
  }
  g_net->closeListen(lcomm);
  return {std::make_unique<PluginLink>(scomm, true), std::make_unique<PluginLink>(rcomm, false)};
}

int tcp_connect(const std::string& address) {
  size_t colon = address.rfind(':');
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints, &res) != 0) fail("resolve");
  int fd = socket(res->ai_family, SOCK_STREAM, 0);
  if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0) fail(std::string("connect: ") + std::strerror(errno));
  freeaddrinfo(res);
  set_nodelay(fd);
  return fd;
}

/// The reference: K sockets, used both ways (the way back carries the acks and pongs).
std::pair<std::unique_ptr<Link>, std::unique_ptr<Link>> reference_links(const BenchOptions& o) {
  std::vector<int> fds;
  if (o.send) {
    for (int i = 0; i < o.streams; ++i) fds.push_back(tcp_connect(o.address));
  } else {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    std::string host = o.address.empty() ? "0.0.0.0" : o.address;
    inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
    if (bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(l, 64) != 0) fail("bind/listen");
    socklen_t len = sizeof sa;
    getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len);
    std::printf("ADDRESS %s:%u\n", host.c_str(), ntohs(sa.sin_port));
    std::fflush(stdout);
    for (int i = 0; i < o.streams; ++i) {
      int fd = ::accept(l, nullptr, nullptr);
      if (fd < 0) fail("accept");
      set_nodelay(fd);
      fds.push_back(fd);  // accepted in connect order (a single connector, sequential connects)
    }
    close(l);
  }
  // Both directions share the sockets; they are never used both ways at once.
  auto link = std::make_shared<RefLink>(std::move(fds));
  struct Shared : Link {
    std::shared_ptr<RefLink> l;
    explicit Shared(std::shared_ptr<RefLink> x) : l(std::move(x)) {}
    void stream(bool send, std::byte* buf, size_t size, long count) override { l->stream(send, buf, size, count); }
  };
  return {std::make_unique<Shared>(link), std::make_unique<Shared>(link)};
}

}  // namespace

int run_bench(int argc, char** argv) {
  BenchOptions o = parse_bench(argc, argv);
  auto [out, back] = o.transport == "plugin" ? plugin_links(o) : reference_links(o);
  size_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  std::vector<std::byte> buf(std::max<size_t>(max_size, 1));
  std::memset(buf.data(), 0x5a, buf.size());
  std::byte ack[1] = {};
  // Warm-up (64 MiB), then wait for the driver (tc set-up happens here).
  size_t warm = std::min<size_t>(max_size, 4u << 20);
  long warm_count = static_cast<long>((64u << 20) / std::max<size_t>(warm, 1));
  if (o.send) {
    out->stream(true, buf.data(), warm, warm_count);
    back->stream(false, ack, 1, 1);
    std::printf("WARM\n");
    std::fflush(stdout);
    read_stdin_line();
    std::byte go[1] = {};
    out->stream(true, go, 1, 1);
  } else {
    back->stream(false, buf.data(), warm, warm_count);
    out->stream(true, ack, 1, 1);
    back->stream(false, ack, 1, 1);
  }
  for (size_t size : o.sizes) {
    long count = count_for(size, o.iters, o.sample_mib);
    auto t0 = Clock::now();
    if (o.send) {
      out->stream(true, buf.data(), size, count);
      back->stream(false, ack, 1, 1);
    } else {
      back->stream(false, buf.data(), size, count);
      out->stream(true, ack, 1, 1);
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    double lat_us = -1;
    if (wants_latency(size)) {
      long pings = std::max(8L, o.iters * 8);
      auto l0 = Clock::now();
      for (long i = 0; i < pings; ++i) {
        if (o.send) {
          out->stream(true, buf.data(), size, 1);
          back->stream(false, buf.data(), size, 1);
        } else {
          back->stream(false, buf.data(), size, 1);
          out->stream(true, buf.data(), size, 1);
        }
      }
      lat_us = std::chrono::duration<double, std::micro>(Clock::now() - l0).count() / static_cast<double>(pings) / 2;
    }
    if (o.send) {
      std::printf("RESULT %s %zu %.1f %.1f\n", o.transport.c_str(), size,
                  static_cast<double>(size) * static_cast<double>(count) / secs / 1e6, lat_us);
      std::fflush(stdout);
    }
  }
  std::printf("DONE\n");
  std::fflush(stdout);
  return 0;
}
