// tests/nccl/harness.cc — drives libnccl-net-remora.so as NCCL's proxy thread does: dlopen,
// find ncclNetPlugin_v<N>, init, devices, getProperties, then listen / connect / accept
// in separate processes (the handle travels as hex on stdout and the command line, as
// NCCL's bootstrap carries it), isend/irecv/test/iflush with many requests in flight,
// grouped receives, regMr (with cached subranges) or none, and the close calls. Every
// byte received is checked. Every loop has a deadline; nothing sleeps.
//
//   harness recv  --plugin P --version N [scenario options]   prints "HANDLE <hex>", then "OK ..."
//   harness send  --plugin P --version N --handle HEX [same scenario options]
//   harness bench-recv / bench-send  --transport plugin|reference ...  (bench/nccl_compare.py)
//
// Scenario options (both sides must get the same ones): --sizes a,b,c (bytes, one message
// each, cycled over --messages), --messages M, --group n (grouped receive of n), --window W
// (requests in flight), --reg 0|1, --slack B (the receiver posts B bytes more than sent).
// Failure modes: --mode normal|kill-wait|stale|bad-secret|bad-stage|garbage.
// --memory cuda: both sides' buffers in CUDA memory (regMr with NCCL_PTR_CUDA), filled and
// checked through the driver's copies.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "net_abi.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stdout, "FAIL ");
  std::vfprintf(stdout, fmt, ap);
  std::fprintf(stdout, "\n");
  va_end(ap);
  std::fflush(stdout);
  std::exit(2);
}

void nccl_log(ncclDebugLogLevel level, unsigned long /*flags*/, const char* file, int line, const char* fmt, ...) {
  if (level > NCCL_LOG_INFO && std::getenv("HARNESS_TRACE") == nullptr) return;
  if (level == NCCL_LOG_INFO && std::getenv("NCCL_DEBUG") == nullptr) return;
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "[%d] %s %s:%d ", static_cast<int>(getpid()), level == NCCL_LOG_WARN ? "WARN" : "INFO", file,
               line);
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
}

/// One calling convention for every version (the widest), like NCCL's compat shims.
struct Net {
  int version = 0;
  void* ctx = nullptr;
  const ncclNet_v8_t* v8 = nullptr;
  const ncclNet_v9_t* v9 = nullptr;
  const ncclNet_v10_t* v10 = nullptr;
  const ncclNet_v11_t* v11 = nullptr;
  const ncclNet_v12_t* v12 = nullptr;

  template <typename F>
  auto call(F f) {
    switch (version) {
      case 8: return f(v8);
      case 9: return f(v9);
      case 10: return f(v10);
      case 11: return f(v11);
      default: return f(v12);
    }
  }

  ncclResult_t init() {
    switch (version) {
      case 8: return v8->init(nccl_log);
      case 9: return v9->init(nccl_log);
      case 10: return v10->init(nccl_log, nullptr);
      case 11: {
        ncclNetCommConfig_v11_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return v11->init(&ctx, 0x1234, &cfg, nccl_log, nullptr);
      }
      default: {
        ncclNetCommConfig_v12_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return v12->init(&ctx, 0x1234, &cfg, nccl_log, nullptr);
      }
    }
  }
  ncclResult_t finalize() {
    if (version == 11) return v11->finalize(ctx);
    if (version == 12) return v12->finalize(ctx);
    return ncclSuccess;
  }
  ncclResult_t set_attr() {
    ncclNetAttr_v11_t a{{-1, -1, -1, -1}, {-1, -1, -1, -1}, 0, 0, 0};
    if (version == 11) return v11->setNetAttr(ctx, &a);
    if (version == 12) return v12->setNetAttr(ctx, &a);
    return ncclSuccess;
  }
  ncclResult_t devices(int* n) {
    return call([&](auto t) { return t->devices(n); });
  }
  /// makeVDevice (v9+) of the physical devices `devs`.
  ncclResult_t make_vdevice(const std::vector<int>& devs, int* d) {
    return call([&](auto t) {
      if constexpr (requires { t->makeVDevice; }) {
        return fuse(t->makeVDevice, devs, d);
      } else {
        return ncclInternalError;  // v8 has no virtual devices
      }
    });
  }
  template <typename VProps>
  static ncclResult_t fuse(ncclResult_t (*fn)(int*, VProps*), const std::vector<int>& devs, int* d) {
    VProps props{};
    if (fn == nullptr) return ncclInternalError;
    if (devs.size() > std::size(props.devs)) return ncclInvalidArgument;
    props.ndevs = static_cast<int>(devs.size());
    std::copy(devs.begin(), devs.end(), props.devs);
    return fn(d, &props);
  }
  /// Properties checked for what NCCL relies on (`members`: the vProps it must report,
  /// {dev} for a physical device); returns the name and ptrSupport.
  void check_props(int dev, const std::vector<int>& members, std::string* name, int* ptr_support) {
    auto check = [&](auto t, auto props) {
      ncclResult_t r = t->getProperties(dev, &props);
      if (r != ncclSuccess) die("getProperties(%d) = %d", dev, r);
      if (props.name == nullptr || props.name[0] == '\0') die("no device name");
      if ((props.ptrSupport & NCCL_PTR_HOST) == 0) die("ptrSupport lacks NCCL_PTR_HOST");
      if (props.speed <= 0 || props.maxComms <= 0 || props.maxRecvs < 1 || props.regIsGlobal != 1) {
        die("implausible properties: speed %d maxComms %d maxRecvs %d", props.speed, props.maxComms, props.maxRecvs);
      }
      if constexpr (requires { props.maxP2pBytes; }) {
        if (props.maxP2pBytes == 0 || props.vProps.ndevs != static_cast<int>(members.size()) ||
            !std::equal(members.begin(), members.end(), props.vProps.devs)) {
          die("bad v9+ props of device %d (vProps.ndevs %d)", dev, props.vProps.ndevs);
        }
      }
      *name = props.name;
      *ptr_support = props.ptrSupport;
      return ncclSuccess;
    };
    switch (version) {
      case 8: check(v8, ncclNetProperties_v8_t{}); break;
      case 9: check(v9, ncclNetProperties_v9_t{}); break;
      case 10: check(v10, ncclNetProperties_v10_t{}); break;
      case 11: check(v11, ncclNetProperties_v11_t{}); break;
      default: check(v12, ncclNetProperties_v12_t{}); break;
    }
  }
  ncclResult_t listen(int dev, void* handle, void** comm) {
    if (version >= 11) {
      return version == 11 ? v11->listen(ctx, dev, handle, comm) : v12->listen(ctx, dev, handle, comm);
    }
    return call([&](auto t) {
      if constexpr (requires { t->finalize; }) {
        return ncclInternalError;
      } else {
        return t->listen(dev, handle, comm);
      }
    });
  }
  ncclResult_t connect(int dev, void* handle, void** comm) {
    switch (version) {
      case 8: return v8->connect(dev, handle, comm, nullptr);
      case 9: return v9->connect(dev, handle, comm, nullptr);
      case 10: {
        ncclNetCommConfig_v10_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return v10->connect(dev, &cfg, handle, comm, nullptr);
      }
      case 11: return v11->connect(ctx, dev, handle, comm, nullptr);
      default: return v12->connect(ctx, dev, handle, comm, nullptr);
    }
  }
  ncclResult_t accept(void* l, void** comm) {
    return call([&](auto t) { return t->accept(l, comm, nullptr); });
  }
  int mem_type = NCCL_PTR_HOST;
  ncclResult_t reg(void* comm, void* data, size_t size, void** mh) {
    return call([&](auto t) { return t->regMr(comm, data, size, mem_type, mh); });
  }
  ncclResult_t dereg(void* comm, void* mh) {
    return call([&](auto t) { return t->deregMr(comm, mh); });
  }
  ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh, void** req) {
    switch (version) {
      case 8: return v8->isend(comm, data, static_cast<int>(size), tag, mh, req);
      case 9: return v9->isend(comm, data, size, tag, mh, req);
      case 10: return v10->isend(comm, data, size, tag, mh, nullptr, req);
      case 11: return v11->isend(comm, data, size, tag, mh, nullptr, req);
      default: return v12->isend(comm, data, size, tag, mh, nullptr, req);
    }
  }
  ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mh, void** req) {
    *req = reinterpret_cast<void*>(static_cast<uintptr_t>(NCCL_NET_OPTIONAL_RECV_COMPLETION));  // NCCL's hint, ignored
    switch (version) {
      case 8: {
        int narrow[8];
        for (int i = 0; i < n; ++i) narrow[i] = static_cast<int>(sizes[i]);
        return v8->irecv(comm, n, data, narrow, tags, mh, req);
      }
      case 9: return v9->irecv(comm, n, data, sizes, tags, mh, req);
      case 10: return v10->irecv(comm, n, data, sizes, tags, mh, nullptr, req);
      case 11: return v11->irecv(comm, n, data, sizes, tags, mh, nullptr, req);
      default: return v12->irecv(comm, n, data, sizes, tags, mh, nullptr, req);
    }
  }
  ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mh, void** req) {
    return call([&](auto t) { return t->iflush(comm, n, data, sizes, mh, req); });
  }
  ncclResult_t test(void* req, int* done, int* sizes) {
    return call([&](auto t) { return t->test(req, done, sizes); });
  }
  ncclResult_t close_send(void* c) {
    return call([&](auto t) { return t->closeSend(c); });
  }
  ncclResult_t close_recv(void* c) {
    return call([&](auto t) { return t->closeRecv(c); });
  }
  ncclResult_t close_listen(void* c) {
    return call([&](auto t) { return t->closeListen(c); });
  }
};

struct Options {
  std::string role, plugin, handle_hex, mode = "normal", transport = "plugin";
  int version = 12, group = 1, window = NCCL_NET_MAX_REQUESTS, dev = 0, streams = 4;
  long messages = 0, iters = 20;
  bool reg = true;
  size_t slack = 0;
  std::vector<size_t> sizes{4096};
  std::vector<int> merge;  // --merge 0,1: makeVDevice of these devices, used instead of --dev
  int timeout_s = 60;
  std::string address;  // reference transport: where the receiver listens
  bool cuda = false;     // --memory cuda: buffers in CUDA memory (the driver REMORA_CUDA_DRIVER names)
};

std::vector<size_t> parse_sizes(const char* s) {
  std::vector<size_t> out;
  for (const char* p = s; *p != '\0';) {
    char* end = nullptr;
    out.push_back(std::strtoull(p, &end, 10));
    p = (*end == ',') ? end + 1 : end;
    if (end == p && *end != '\0') die("bad size list %s", s);
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) die("usage: harness recv|send|bench-recv|bench-send --plugin P ...");
  o.role = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--plugin") o.plugin = v;
    else if (k == "--version") o.version = std::atoi(v);
    else if (k == "--handle") o.handle_hex = v;
    else if (k == "--sizes") o.sizes = parse_sizes(v);
    else if (k == "--messages") o.messages = std::atol(v);
    else if (k == "--group") o.group = std::atoi(v);
    else if (k == "--window") o.window = std::atoi(v);
    else if (k == "--reg") o.reg = std::atoi(v) != 0;
    else if (k == "--slack") o.slack = std::strtoull(v, nullptr, 10);
    else if (k == "--mode") o.mode = v;
    else if (k == "--dev") o.dev = std::atoi(v);
    else if (k == "--merge") {
      for (size_t n : parse_sizes(v)) o.merge.push_back(static_cast<int>(n));
    } else if (k == "--timeout")
      o.timeout_s = std::atoi(v);
    else if (k == "--transport") o.transport = v;
    else if (k == "--streams") o.streams = std::atoi(v);
    else if (k == "--iters") o.iters = std::atol(v);
    else if (k == "--address") o.address = v;
    else if (k == "--memory") o.cuda = std::string(v) == "cuda";
    else die("unknown option %s", k.c_str());
  }
  if (o.messages == 0) o.messages = static_cast<long>(o.sizes.size());
  if (o.group < 1 || o.group > 8 || o.messages % o.group != 0) die("--messages must be a multiple of --group (1..8)");
  return o;
}

Net load(Options& o) {
  void* lib = dlopen(o.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) die("dlopen(%s): %s", o.plugin.c_str(), dlerror());
  Net net;
  net.version = o.version;
  std::string sym = "ncclNetPlugin_v" + std::to_string(o.version);
  void* table = dlsym(lib, sym.c_str());
  if (table == nullptr) die("%s not exported", sym.c_str());
  switch (o.version) {
    case 8: net.v8 = static_cast<const ncclNet_v8_t*>(table); break;
    case 9: net.v9 = static_cast<const ncclNet_v9_t*>(table); break;
    case 10: net.v10 = static_cast<const ncclNet_v10_t*>(table); break;
    case 11: net.v11 = static_cast<const ncclNet_v11_t*>(table); break;
    case 12: net.v12 = static_cast<const ncclNet_v12_t*>(table); break;
    default: die("no version %d", o.version);
  }
  const char* name = net.call([](auto t) { return t->name; });
  if (std::strcmp(name, "remora") != 0) die("table name %s", name);
  if (net.init() != ncclSuccess) die("init failed");
  if (net.set_attr() != ncclSuccess) die("setNetAttr failed");
  int ndev = 0;
  if (net.devices(&ndev) != ncclSuccess || ndev < 1) die("devices: %d", ndev);
  std::string dev_name;
  int ptr = 0;
  for (int d = 0; d < ndev; ++d) net.check_props(d, {d}, &dev_name, &ptr);
  std::vector<int> members{o.dev};
  if (!o.merge.empty()) {  // as NCCL's NIC fusion (NCCL_NET_FORCE_MERGE) does it
    int vdev = -1;
    for (const std::vector<int>& bad :
         {std::vector<int>{}, std::vector<int>{0, 0}, std::vector<int>{0, ndev}, std::vector<int>{-1, 0}}) {
      if (ncclResult_t r = net.make_vdevice(bad, &vdev); r != ncclInvalidArgument) {
        die("makeVDevice of %zu bad devices: %d, not ncclInvalidArgument", bad.size(), r);
      }
    }
    if (ncclResult_t r = net.make_vdevice(o.merge, &vdev); r != ncclSuccess) die("makeVDevice: %d", r);
    int again = -1;
    if (net.make_vdevice(o.merge, &again) != ncclSuccess || again != vdev)
      die("makeVDevice twice: %d, %d", vdev, again);
    int after = 0;
    if (net.devices(&after) != ncclSuccess || after != ndev + 1 || vdev != ndev) {
      die("makeVDevice gave device %d; devices() %d after %d", vdev, after, ndev);
    }
    ndev = after;
    o.dev = vdev;
    members = o.merge;
  }
  if (o.dev >= ndev) die("device %d of %d", o.dev, ndev);
  net.check_props(o.dev, members, &dev_name, &ptr);
  std::printf("DEVICE %s ptrSupport %d ndev %d\n", dev_name.c_str(), ptr, ndev);
  std::fflush(stdout);
  return net;
}

// --- the scenario both sides agree on ----------------------------------------------------

size_t msg_size(const Options& o, long k) { return o.sizes[static_cast<size_t>(k) % o.sizes.size()]; }
int msg_tag(const Options& o, long k) { return static_cast<int>((k / o.group) * 7 + (k % o.group)) * 3 - 5; }
uint8_t pattern(long k, size_t off) { return static_cast<uint8_t>(k * 131 + off * 7 + (off >> 9)); }

struct Slot {
  void* req = nullptr;
  long first = 0;  // message index of the first in its group
};

void require_deadline(Clock::time_point deadline, const char* what) {
  if (Clock::now() > deadline) die("timed out: %s", what);
}

std::string to_hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

void from_hex(const std::string& s, unsigned char* out) {
  if (s.size() != 2 * NCCL_NET_HANDLE_MAXSIZE) die("handle of %zu hex digits", s.size());
  for (size_t i = 0; i < NCCL_NET_HANDLE_MAXSIZE; ++i) out[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
}

/// Registration as NCCL does it: the whole buffer once, then each message's subrange
/// (which the plugin's cache must answer without a new registration).
struct Buffers {
  std::vector<std::vector<uint8_t>> bufs;
  void* whole_mh = nullptr;
};

/// CUDA memory through the driver the plugin's remora also loads (REMORA_CUDA_DRIVER: the
/// same file, so the same instance): allocation and the copies that fill and check it.
struct CudaMem {
  void* lib = nullptr;
  int (*init)(unsigned) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*ctx_retain)(void**, int) = nullptr;
  int (*ctx_push)(void*) = nullptr;
  int (*alloc)(unsigned long long*, size_t) = nullptr;
  int (*htod)(unsigned long long, const void*, size_t) = nullptr;
  int (*dtoh)(void*, unsigned long long, size_t) = nullptr;

  int (*mem_free)(unsigned long long) = nullptr;
  uint8_t* ptr_ = nullptr;

  CudaMem() = default;
  CudaMem(const CudaMem&) = delete;
  CudaMem& operator=(const CudaMem&) = delete;
  /// Frees the allocation: device memory left mapped (no access, as the emulated driver
  /// maps it) at exit would be read by LeakSanitizer's scan and fault.
  ~CudaMem() {
    if (ptr_ != nullptr) mem_free(reinterpret_cast<uintptr_t>(ptr_));
  }

  template <typename F>
  void sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (f == nullptr) die("CUDA driver lacks %s", name);
  }
  uint8_t* allocate(size_t size) {
    const char* path = std::getenv("REMORA_CUDA_DRIVER");
    lib = dlopen(path != nullptr ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) die("dlopen CUDA driver: %s", dlerror());
    sym(init, "cuInit");
    sym(device_get, "cuDeviceGet");
    sym(ctx_retain, "cuDevicePrimaryCtxRetain");
    sym(ctx_push, "cuCtxPushCurrent_v2");
    sym(alloc, "cuMemAlloc_v2");
    sym(htod, "cuMemcpyHtoD_v2");
    sym(dtoh, "cuMemcpyDtoH_v2");
    sym(mem_free, "cuMemFree_v2");
    int dev = 0;
    void* ctx = nullptr;
    unsigned long long ptr = 0;
    if (init(0) != 0 || device_get(&dev, 0) != 0 || ctx_retain(&ctx, dev) != 0 || ctx_push(ctx) != 0 ||
        alloc(&ptr, size) != 0) {
      die("CUDA set-up failed");
    }
    ptr_ = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(ptr));
    return ptr_;
  }
  void to_device(uint8_t* dst, const uint8_t* src, size_t n) {
    if (n > 0 && htod(reinterpret_cast<uintptr_t>(dst), src, n) != 0) die("cuMemcpyHtoD failed");
  }
  void to_host(uint8_t* dst, const uint8_t* src, size_t n) {
    if (n > 0 && dtoh(dst, reinterpret_cast<uintptr_t>(src), n) != 0) die("cuMemcpyDtoH failed");
  }
};

int run_recv(Options o) {
  Net net = load(o);
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lcomm = nullptr;
  if (net.listen(o.dev, handle, &lcomm) != ncclSuccess || lcomm == nullptr) die("listen");
  std::printf("HANDLE %s\n", to_hex(handle, sizeof handle).c_str());
  std::fflush(stdout);
  auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  if (o.mode == "stale") {  // close before anyone connects: the handle goes stale
    if (net.close_listen(lcomm) != ncclSuccess) die("closeListen");
    std::printf("CLOSED\n");
    std::fflush(stdout);
    char line[16];
    if (std::fgets(line, sizeof line, stdin) == nullptr) {}  // wait for the test to finish with us
    net.finalize();
    return 0;
  }
  void* rcomm = nullptr;
  while (rcomm == nullptr) {
    if (net.accept(lcomm, &rcomm) != ncclSuccess) die("accept");
    require_deadline(deadline, "accept");
  }
  std::printf("ACCEPTED\n");
  std::fflush(stdout);

  // Buffers: one per message, posted with o.slack bytes more than will be sent.
  size_t total = 0;
  for (long k = 0; k < o.messages; ++k) total += msg_size(o, k) + o.slack;
  std::vector<uint8_t> host_arena(total + 1), mirror;
  CudaMem cuda;
  uint8_t* base = host_arena.data();
  if (o.cuda) {
    base = cuda.allocate(host_arena.size());
    net.mem_type = NCCL_PTR_CUDA;
  }
  std::vector<size_t> offset(static_cast<size_t>(o.messages));
  for (long k = 0, at = 0; k < o.messages; ++k) {
    offset[static_cast<size_t>(k)] = static_cast<size_t>(at);
    at += static_cast<long>(msg_size(o, k) + o.slack);
  }
  void* whole = nullptr;
  if (o.reg && net.reg(rcomm, base, host_arena.size(), &whole) != ncclSuccess) die("regMr");

  if (o.mode == "kill-wait") {  // a receive for a message that never comes; the test kills the sender
    std::vector<uint8_t> buf(msg_size(o, 0) + 1);
    void* data[1] = {buf.data()};
    size_t sz[1] = {buf.size()};
    int tag[1] = {msg_tag(o, 0)};
    void* mh[1] = {nullptr};
    void* req = nullptr;
    while (req == nullptr) {
      if (net.irecv(rcomm, 1, data, sz, tag, mh, &req) != ncclSuccess) die("irecv");
    }
    // Poll it for 300 ms as NCCL's proxy does while the sender stays alive and silent:
    // how many test() calls that took and the longest one (the idle wait, IdleWait in
    // plugin.cc, makes them few and bounded).
    long calls = 0;
    Clock::duration longest{};
    for (auto end = Clock::now() + std::chrono::milliseconds(300); Clock::now() < end; ++calls) {
      int done = 0;
      auto t0 = Clock::now();
      if (net.test(req, &done, nullptr) != ncclSuccess || done) die("an idle receive ended");
      longest = std::max(longest, Clock::now() - t0);
    }
    std::printf("IDLE %ld %lld\n", calls,
                static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(longest).count()));
    std::printf("POSTED\n");
    std::fflush(stdout);
    for (;;) {
      int done = 0, got[1] = {0};
      ncclResult_t r = net.test(req, &done, got);
      if (r != ncclSuccess) {
        std::printf("PEER_ERROR %d\n", static_cast<int>(r));
        std::fflush(stdout);
        return 0;
      }
      if (done) die("a receive completed although nothing was sent (%d bytes)", got[0]);
      require_deadline(deadline, "the dead peer's error");
    }
  }

  long groups = o.messages / o.group;
  std::vector<Slot> inflight;
  long posted = 0, completed = 0;
  size_t bytes = 0;
  while (completed < groups) {
    require_deadline(deadline, "receives");
    if (posted < groups && static_cast<int>(inflight.size()) < o.window) {
      void* data[8];
      size_t sz[8];
      int tags[8];
      void* mh[8];
      std::vector<void*> sub(static_cast<size_t>(o.group), nullptr);
      for (int j = 0; j < o.group; ++j) {
        long k = posted * o.group + j;
        data[j] = base + offset[static_cast<size_t>(k)];
        sz[j] = msg_size(o, k) + o.slack;
        tags[j] = msg_tag(o, k);
        mh[j] = nullptr;
        if (o.reg && net.reg(rcomm, data[j], sz[j] == 0 ? 1 : sz[j], &mh[j]) != ncclSuccess) die("regMr subrange");
      }
      void* req = nullptr;
      if (net.irecv(rcomm, o.group, data, sz, tags, mh, &req) != ncclSuccess) die("irecv");
      for (int j = 0; j < o.group; ++j) {
        if (mh[j] != nullptr && net.dereg(rcomm, mh[j]) != ncclSuccess) die("deregMr subrange");
      }
      if (req != nullptr) {
        inflight.push_back({req, posted * o.group});
        ++posted;
        continue;
      }
    }
    // Test the oldest (NCCL tests in order).
    Slot& s = inflight.front();
    int done = 0, got[8] = {};
    if (net.test(s.req, &done, got) != ncclSuccess) die("test(recv) failed at group %ld", s.first / o.group);
    if (!done) continue;
    for (int j = 0; j < o.group; ++j) {
      long k = s.first + j;
      size_t want = msg_size(o, k);
      if (static_cast<size_t>(got[j]) != want) die("message %ld: test reported %d bytes, %zu were sent", k, got[j], want);
      const uint8_t* p = base + offset[static_cast<size_t>(k)];
      if (o.cuda) {
        mirror.resize(want);
        cuda.to_host(mirror.data(), p, want);
        p = mirror.data();
      }
      for (size_t b = 0; b < want; ++b) {
        if (p[b] != pattern(k, b)) die("message %ld byte %zu: %u, expected %u", k, b, p[b], pattern(k, b));
      }
      bytes += want;
    }
    if (o.reg) {  // iflush as NCCL calls it after a receive (a no-op for host memory, but a request)
      void* fdata[1] = {base};
      int fsz[1] = {1};
      void* fmh[1] = {whole};
      void* freq = nullptr;
      if (net.iflush(rcomm, 1, fdata, fsz, fmh, &freq) != ncclSuccess) die("iflush");
      int fdone = 0;
      while (freq != nullptr && !fdone) {
        if (net.test(freq, &fdone, nullptr) != ncclSuccess) die("test(flush)");
        require_deadline(deadline, "flush");
      }
    }
    inflight.erase(inflight.begin());
    ++completed;
  }
  if (whole != nullptr && net.dereg(rcomm, whole) != ncclSuccess) die("deregMr");
  if (net.close_recv(rcomm) != ncclSuccess) die("closeRecv");
  if (net.close_listen(lcomm) != ncclSuccess) die("closeListen");
  if (net.finalize() != ncclSuccess) die("finalize");
  std::printf("OK received %ld messages, %zu bytes, verified\n", o.messages, bytes);
  std::fflush(stdout);
  return 0;
}

int run_send(Options o) {
  Net net = load(o);
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  from_hex(o.handle_hex, handle);
  auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  auto connect_all = [&](unsigned char* h) -> std::pair<ncclResult_t, void*> {
    void* comm = nullptr;
    for (;;) {
      ncclResult_t r = net.connect(o.dev, h, &comm);
      if (r != ncclSuccess || comm != nullptr) return {r, comm};
      require_deadline(deadline, "connect");
    }
  };
  if (o.mode == "garbage" || o.mode == "bad-stage" || o.mode == "bad-secret" || o.mode == "stale") {
    unsigned char bad[NCCL_NET_HANDLE_MAXSIZE];
    std::memcpy(bad, handle, sizeof bad);
    if (o.mode == "garbage") std::memset(bad, 0x5a, sizeof bad);
    if (o.mode == "bad-stage") bad[88] ^= 0x40;  // the connector's stage field: set, as another process's connect leaves it
    if (o.mode == "bad-secret") bad[72] ^= 0x01;  // a byte of the listener's secret
    auto [r, comm] = connect_all(bad);
    if (r == ncclSuccess) die("connect with a %s handle succeeded", o.mode.c_str());
    std::printf("REFUSED %d\n", static_cast<int>(r));
    std::fflush(stdout);
    if (o.mode != "bad-secret") {
      net.finalize();
      return 0;
    }
    // The listener must still accept a good connection after refusing the bad one.
  }
  auto [r, scomm] = connect_all(handle);
  if (r != ncclSuccess || scomm == nullptr) die("connect = %d", r);
  std::printf("CONNECTED\n");
  std::fflush(stdout);

  size_t total = 0;
  for (long k = 0; k < o.messages; ++k) total += msg_size(o, k);
  std::vector<uint8_t> arena(total + 1);
  std::vector<size_t> offset(static_cast<size_t>(o.messages));
  for (long k = 0, at = 0; k < o.messages; ++k) {
    offset[static_cast<size_t>(k)] = static_cast<size_t>(at);
    for (size_t b = 0; b < msg_size(o, k); ++b) arena[static_cast<size_t>(at) + b] = pattern(k, b);
    at += static_cast<long>(msg_size(o, k));
  }
  uint8_t* base = arena.data();
  CudaMem cuda;
  if (o.cuda) {
    base = cuda.allocate(arena.size());
    cuda.to_device(base, arena.data(), arena.size());
    net.mem_type = NCCL_PTR_CUDA;
  }
  void* whole = nullptr;
  if (o.reg && net.reg(scomm, base, arena.size(), &whole) != ncclSuccess) die("regMr");
  if (o.mode == "kill-wait") {
    std::printf("READY\n");
    std::fflush(stdout);
    char line[16];
    if (std::fgets(line, sizeof line, stdin) == nullptr) {}  // killed here by the test
    return 0;
  }
  std::vector<void*> inflight;
  long posted = 0, completed = 0;
  int window = o.window * o.group;  // a sender may have maxRecvs times more
  while (completed < o.messages) {
    require_deadline(deadline, "sends");
    if (posted < o.messages && static_cast<int>(inflight.size()) < window) {
      void* req = nullptr;
      if (net.isend(scomm, base + offset[static_cast<size_t>(posted)], msg_size(o, posted), msg_tag(o, posted),
                    whole, &req) != ncclSuccess) {
        die("isend");
      }
      if (req != nullptr) {
        inflight.push_back(req);
        ++posted;
        continue;
      }
    }
    int done = 0, sz[1] = {-1};
    if (net.test(inflight.front(), &done, sz) != ncclSuccess) die("test(send) failed at message %ld", completed);
    if (!done) continue;
    if (static_cast<size_t>(sz[0]) != msg_size(o, completed)) die("send size %d", sz[0]);
    inflight.erase(inflight.begin());
    ++completed;
  }
  if (whole != nullptr && net.dereg(scomm, whole) != ncclSuccess) die("deregMr");
  // NCCL closes only once the receiver is done; wait for the test's word.
  std::printf("SENT\n");
  std::fflush(stdout);
  char line[16];
  if (std::fgets(line, sizeof line, stdin) == nullptr) {}
  if (net.close_send(scomm) != ncclSuccess) die("closeSend");
  if (net.finalize() != ncclSuccess) die("finalize");
  std::printf("OK\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace

int run_bench(int argc, char** argv);  // bench.cc

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]).starts_with("bench")) return run_bench(argc, argv);
  Options o = parse(argc, argv);
  if (o.role == "recv") return run_recv(o);
  if (o.role == "send") return run_send(o);
  die("unknown role %s", o.role.c_str());
}
