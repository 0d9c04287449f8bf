// remora_rma_target — a passive RMA target for the hostile-peer tests.
//
//   remora_rma_target [--rights=rwa] [--size=BYTES] [--guard=BYTES] [--rma-window=N]
//                     [--eager-limit=BYTES] [--pool=1] [--parent-pid=PID] [--max-seconds=S]
//
// Maps guard + size + guard bytes, fills the guards with fixed streams (seeds
// kGuardBeforeSeed / kGuardAfterSeed of test_data.h's fill_stream) and the middle with
// stream 1, registers ONLY the middle as a Region with the remote rights in --rights
// (r read, w write, a atomic), listens on 127.0.0.1:0 and prints
// With --pool=1 the three are instead three adjacent buffers of one Pool (size == guard,
// at most 16 KiB: an arena a same-host peer may map, docs/protocol.md "Direct
// mappings"), the key is the middle buffer's, `dereg` destroys the pool (its arena is
// deregistered and unmapped; `sum` then answers ERR) and `reg` is refused.
//
//   READY <port> <serialized RemoteKey, hex> <size> <guard>
//
// It accepts endpoints forever on a thread and answers one line per command on stdin:
//   sum                 -> SUM <xxh3 region> <xxh3 guard before> <xxh3 guard after>   (hex)
//   fill <seed>         -> OK        region := fill_stream(seed)
//   dereg               -> OK        deregister the region (its keys go stale)
//   reg <rights>        -> KEY <hex> register the same bytes again with these rights
//   key <off> <len> <rights> -> KEY <hex> | ERR <why>   a window key from Region::remote_key
//   rss                 -> RSS <VmRSS> <VmHWM>   (kB; HWM is the peak, so a transient blow-up shows)
//   notes               -> NOTES <n> <value>:<region>:<offset>:<length> ...  (every notification so far)
//   eps                 -> EPS <accepted> <failed>
//   await <n>           -> EPS ... once n endpoints were accepted (ERR after 20 s)
//   quit                -> BYE, then a clean shutdown and exit 0
// A malformed command is answered "ERR ..."; EOF on stdin ends the program (exit 0).
// It never outlives the test: it dies with its parent and after --max-seconds.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/memory.h"
#include "remora/pool.h"
#include "support/peer_program.h"
#include "support/raw_rma.h"
#include "support/rma_target.h"
#include "support/test_data.h"

namespace {

using namespace remora;
using namespace remora::itest;


void print_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}


std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// A "Vm...:" line of /proc/self/status, in kB.
uint64_t vm_kb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10);
  }
  return 0;
}

/// Endpoints accepted so far (kept, failed or not, so their notifications stay readable).
class Endpoints {
 public:
  void add(std::shared_ptr<Endpoint> ep) {
    {
      std::lock_guard lock(mu_);
      eps_.push_back(std::move(ep));
    }
    cv_.notify_all();
  }
  /// Waits until `n` endpoints were accepted; false at the deadline.
  bool await(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return eps_.size() >= n; });
  }
  std::vector<std::shared_ptr<Endpoint>> snapshot() {
    std::lock_guard lock(mu_);
    return eps_;
  }
  void close_all() {
    for (auto& ep : snapshot()) ep->close();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Endpoint>> eps_;
};

int run(const Flags& flags) {
  const auto rights_text = flags.str("rights", "rwa");
  const auto rights = rma_target::parse_rights(rights_text);
  if (!rights) die("--rights takes letters from 'rwa', got " + rights_text);
  const size_t size = flags.num("size", rma_target::kDefaultSize);
  const size_t guard = flags.num("guard", rma_target::kDefaultGuard);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (size == 0 || size % page != 0 || guard % page != 0) die("--size and --guard must be multiples of the page size");

  ContextOptions options;
  options.pin_mode = PinMode::kOff;
  if (flags.has("rma-window")) options.rma_window = static_cast<uint32_t>(flags.num("rma-window", 0));
  if (flags.has("eager-limit")) options.eager_limit = flags.num("eager-limit", 0);
  auto ctx_r = Context::create(options);
  if (!ctx_r) die("Context::create: " + describe(ctx_r.status()));
  auto ctx = std::move(ctx_r).value();

  // One mapping: [guard before][region][guard after]; only the middle is registered.
  // --pool: three adjacent buffers of one pool, the middle one's key handed out.
  const bool use_pool = flags.has("pool");
  if (use_pool && (guard != size || size > (16 << 10))) die("--pool needs --guard equal to --size, at most 16 KiB");
  const size_t total = guard + size + guard;
  std::unique_ptr<Pool> pool;
  std::vector<Buffer> buffers;
  void* map = nullptr;
  if (use_pool) {
    pool =
        std::make_unique<Pool>(*ctx, PoolOptions{.arena_bytes = 4 * size, .min_buffer_bytes = size, .access = *rights});
    for (int i = 0; i < 3; ++i) {
      auto b = pool->allocate(size);
      if (!b) die("Pool::allocate: " + describe(b.status()));
      buffers.push_back(std::move(b).value());
    }
    if (buffers[1].data() != buffers[0].data() + size || buffers[2].data() != buffers[1].data() + size) {
      die("the pool's buffers are not adjacent");
    }
    map = buffers[0].data();
  } else {
    map = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) die("mmap failed");
  }
  auto* base = static_cast<std::byte*>(map);
  const std::span<std::byte> before(base, guard), middle(base + guard, size), after(base + guard + size, guard);
  fill_stream(rma_target::kGuardBeforeSeed, 0, before);
  fill_stream(rma_target::kGuardAfterSeed, 0, after);
  fill_stream(rma_target::kInitialSeed, 0, middle);

  auto register_middle = [&](Access access) {
    auto r = ctx->register_memory(middle.data(), middle.size(), access);
    if (!r) die("register_memory: " + describe(r.status()));
    return std::move(r).value();
  };
  Region region = use_pool ? Region() : register_middle(*rights);
  auto key_hex = [](const RemoteKey& key) { return raw::key_to_hex(key.serialize()); };
  const RemoteKey first_key = use_pool ? buffers[1].remote_key() : region.remote_key();

  auto lr = ctx->listen("127.0.0.1:0");
  if (!lr) die("listen: " + describe(lr.status()));
  std::unique_ptr<Listener> listener = std::move(lr).value();

  Endpoints endpoints;
  std::atomic<bool> stop{false};
  std::thread acceptor([&] {
    while (!stop.load()) {
      // Bounded so `quit` is noticed; a timeout is not an error here.
      auto a = listener->accept(std::chrono::milliseconds(50));
      if (a) endpoints.add(std::move(a).value());
    }
  });

  print_line("READY " + std::to_string(listener->port()) + " " + key_hex(first_key) + " " + std::to_string(size) + " " +
             std::to_string(guard));

  std::vector<std::string> notes;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "sum") {
      if (use_pool && !pool) {
        print_line("ERR the pool is gone (dereg)");
        continue;
      }
      print_line("SUM " + hex64(XXH3_64bits(middle.data(), middle.size())) + " " +
                 hex64(XXH3_64bits(before.data(), before.size())) + " " +
                 hex64(XXH3_64bits(after.data(), after.size())));
    } else if (cmd == "fill") {
      uint64_t seed = 0;
      if (!(in >> seed)) {
        print_line("ERR fill <seed>");
        continue;
      }
      fill_stream(seed, 0, middle);
      print_line("OK");
    } else if (cmd == "dereg") {
      if (use_pool) {
        buffers.clear();
        pool.reset();  // its arenas are deregistered and unmapped
      }
      region.deregister();
      print_line("OK");
    } else if (cmd == "reg" && use_pool) {
      print_line("ERR reg: not with --pool");
    } else if (cmd == "reg") {
      std::string r;
      in >> r;
      const auto access = rma_target::parse_rights(r);
      if (!access) {
        print_line("ERR reg <rights>");
        continue;
      }
      region.deregister();
      region = register_middle(*access);
      print_line("KEY " + key_hex(region.remote_key()));
    } else if (cmd == "key") {
      uint64_t off = 0, len = 0;
      std::string r;
      in >> off >> len >> r;
      const auto access = rma_target::parse_rights(r);
      if (!in || !access) {
        print_line("ERR key <offset> <length> <rights>");
        continue;
      }
      Result<RemoteKey> k = Status(StatusCode::kUnsupported, "the pool is gone (dereg)");
      if (!use_pool) {
        k = region.remote_key(off, len, *access);
      } else if (pool) {
        k = off > size || len > size - off
                ? Result<RemoteKey>(Status(StatusCode::kOutOfRange, "outside the middle buffer"))
                : buffers[1].region().remote_key(buffers[1].region_offset() + off, len, *access);
      }
      print_line(k ? "KEY " + key_hex(*k) : "ERR " + describe(k.status()));
    } else if (cmd == "rss") {
      print_line("RSS " + std::to_string(vm_kb("VmRSS")) + " " + std::to_string(vm_kb("VmHWM")));
    } else if (cmd == "notes") {
      // Notifications are queued before the put completes (its RESP, or through a
      // mapping its ACK), so everything the test saw complete is in a queue by now.
      for (auto& ep : endpoints.snapshot()) {
        while (auto n = ep->poll_notification()) {
          notes.push_back(std::to_string(n->value) + ":" + std::to_string(static_cast<uint32_t>(n->region)) + ":" +
                          std::to_string(n->offset) + ":" + std::to_string(n->length));
        }
      }
      std::string out = "NOTES " + std::to_string(notes.size());
      for (const auto& n : notes) out += " " + n;
      print_line(out);
    } else if (cmd == "eps" || cmd == "await") {
      // await <n>: first wait until the acceptor holds n endpoints. An endpoint serves
      // requests as soon as its handshake completes, possibly before accept() returned
      // it, and `notes` only sees accepted endpoints.
      uint64_t want = 0;
      if (cmd == "await" && (!(in >> want) || !endpoints.await(want, std::chrono::seconds(20)))) {
        print_line("ERR await <n>: not that many endpoints accepted");
        continue;
      }
      const auto all = endpoints.snapshot();
      size_t failed = 0;
      for (auto& ep : all) failed += ep->failed() ? 1 : 0;
      print_line("EPS " + std::to_string(all.size()) + " " + std::to_string(failed));
    } else if (cmd == "quit") {
      print_line("BYE");
      break;
    } else {
      print_line("ERR unknown command '" + cmd + "'");
    }
  }
  stop.store(true);
  acceptor.join();
  endpoints.close_all();
  region.deregister();
  listener.reset();
  buffers.clear();
  pool.reset();
  ctx.reset();
  if (!use_pool) munmap(map, total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags(argc, argv);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const auto parent = static_cast<pid_t>(flags.num("parent-pid", 0));
  if (parent != 0 && getppid() != parent) die("parent is gone");
  alarm(static_cast<unsigned>(flags.num("max-seconds", 300)));
  return run(flags);
}
