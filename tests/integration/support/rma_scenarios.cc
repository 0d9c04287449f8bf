#include "support/rma_scenarios.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>

#include "remora/request.h"
#include "remora/status.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

std::string describe(const Status& s) { return std::string(to_string(s.code())) + " (" + s.message() + ")"; }

// The side channel: fixed-size commands on kRmaCommandTag, one u64 reply each.
enum : uint64_t { kCmdHash = 1, kCmdVerify = 2, kCmdReport = 3, kCmdDone = 4 };
struct Command {
  uint64_t op = 0, a = 0, b = 0, c = 0, d = 0;
};

std::span<const std::byte> bytes_of(const auto& v) { return std::as_bytes(std::span(&v, 1)); }
std::span<std::byte> writable_bytes_of(auto& v) { return std::as_writable_bytes(std::span(&v, 1)); }

/// Closes the endpoint so everything outstanding fails now, then returns `why`.
std::string fail(Endpoint& ep, std::string why) {
  ep.close();
  return why;
}

/// Sends a command and waits for its reply. On failure the endpoint is closed and
/// the pending receive waited for before its stack buffer goes away.
std::string command(Endpoint& ep, const Command& cmd, uint64_t* reply, Ms timeout) {
  uint64_t r = 0;
  Request rr = ep.recv(writable_bytes_of(r), kRmaReplyTag);
  Status s = ep.send(bytes_of(cmd), kRmaCommandTag).wait(timeout);
  if (s.is_ok()) s = rr.wait(timeout);
  if (!s.is_ok()) {
    ep.close();
    (void)rr.wait(timeout);
    return "command " + std::to_string(cmd.op) + ": " + describe(s);
  }
  *reply = r;
  return {};
}

std::string recv_command(Endpoint& ep, Command* cmd, Ms timeout) {
  Request r = ep.recv(writable_bytes_of(*cmd), kRmaCommandTag);
  const Status s = r.wait(timeout);
  if (!s.is_ok()) {
    ep.close();
    (void)r.wait(timeout);
    return "waiting for a command: " + describe(s);
  }
  if (r.bytes() != sizeof(Command)) return "command of " + std::to_string(r.bytes()) + " bytes";
  return {};
}

std::string send_reply(Endpoint& ep, uint64_t value, Ms timeout) {
  const Status s = ep.send(bytes_of(value), kRmaReplyTag).wait(timeout);
  return s.is_ok() ? std::string() : "reply: " + describe(s);
}

/// Answers commands with `handler` until DONE (answered 0).
template <typename Handler>
std::string serve(Endpoint& ep, Ms timeout, Handler&& handler) {
  while (true) {
    Command cmd;
    if (auto e = recv_command(ep, &cmd, timeout); !e.empty()) return e;
    if (cmd.op == kCmdDone) return send_reply(ep, 0, timeout);
    uint64_t reply = 0;
    const std::string problem = handler(cmd, &reply);
    if (auto e = send_reply(ep, reply, timeout); !e.empty()) return e;
    if (!problem.empty()) return problem;
  }
}

std::string done(Endpoint& ep, Ms timeout) {
  uint64_t reply = 1;
  if (auto e = command(ep, {.op = kCmdDone}, &reply, timeout); !e.empty()) return e;
  return reply == 0 ? std::string() : "DONE answered " + std::to_string(reply);
}

uint64_t mix(uint64_t seed, uint64_t i) {
  Rng r(seed * 0x9E3779B97F4A7C15ull + i);
  return r.next();
}

bool overlaps(uint64_t a, uint64_t na, uint64_t b, uint64_t nb) { return na != 0 && nb != 0 && a < b + nb && b < a + na; }

/// Sizes skewed small, with the default eager limit, a common small one and the
/// default chunk size each hit exactly and +-2.
size_t pick_size(Rng& rng, size_t max_size) {
  const double u = rng.unit();
  size_t n = 0;
  if (u < 0.25) {
    n = rng.uniform(0, 64);
  } else if (u < 0.40) {
    n = rng.uniform(16384 - 2, 16384 + 2);
  } else if (u < 0.50) {
    n = rng.uniform(4096 - 2, 4096 + 2);
  } else if (u < 0.89) {
    n = rng.uniform(0, 256 * 1024);
  } else if (u < 0.97) {
    n = rng.uniform(512 * 1024 - 2, 512 * 1024 + 2);
  } else {
    n = rng.uniform(0, max_size);
  }
  return std::min(n, max_size);
}

std::string byte_diff(std::span<const std::byte> got, std::span<const std::byte> want) {
  auto [g, w] = std::mismatch(got.begin(), got.end(), want.begin());
  if (g == got.end()) return {};
  return "byte " + std::to_string(g - got.begin()) + " of " + std::to_string(got.size()) + " is " +
         std::to_string(static_cast<int>(*g)) + ", expected " + std::to_string(static_cast<int>(*w));
}

}  // namespace

std::string send_key(Endpoint& ep, const RemoteKey& key, Ms timeout) {
  const auto bytes = key.serialize();
  const Status s = ep.send(std::span<const std::byte>(bytes), kRmaKeyTag).wait(timeout);
  return s.is_ok() ? std::string() : "sending a key: " + describe(s);
}

std::string recv_key(Endpoint& ep, RemoteKey* key, Ms timeout) {
  std::array<std::byte, RemoteKey::kSerializedSize> bytes{};
  Request r = ep.recv(std::span<std::byte>(bytes), kRmaKeyTag);
  const Status s = r.wait(timeout);
  if (!s.is_ok()) {
    ep.close();
    (void)r.wait(timeout);
    return "waiting for a key: " + describe(s);
  }
  auto k = RemoteKey::deserialize(bytes);
  if (!k) return "received key does not deserialize: " + describe(k.status());
  *key = *k;
  return {};
}

// --- (a) --------------------------------------------------------------------------

std::string random_rma_target(Context& ctx, Endpoint& ep, const RandomRmaOptions& o) {
  GuardedBuffer mem(o.region_size);
  if (!mem.ok()) return "mmap of " + std::to_string(o.region_size) + " bytes failed";
  fill_stream(o.seed, 0, mem.span());
  auto reg = ctx.register_memory(mem.data(), mem.size(), Access::kRemoteRead | Access::kRemoteWrite);
  if (!reg) return "register_memory: " + describe(reg.status());
  const Region region = std::move(reg).value();  // deregistered before `mem` is unmapped
  if (auto e = send_key(ep, region.remote_key(), o.timeout); !e.empty()) return fail(ep, e);
  return serve(ep, o.timeout, [&](const Command& cmd, uint64_t* reply) -> std::string {
    if (cmd.op != kCmdHash) return "unexpected command " + std::to_string(cmd.op);
    *reply = XXH3_64bits(mem.data(), mem.size());
    return {};
  });
}

RandomRmaReport random_rma_initiator(Endpoint& ep, const RandomRmaOptions& o) {
  RandomRmaReport rep;
  const auto t0 = Clock::now();
  RemoteKey key;
  if (rep.error = recv_key(ep, &key, o.timeout); !rep.error.empty()) return rep;
  if (key.length != o.region_size) {
    rep.error = fail(ep, "the target's key covers " + std::to_string(key.length) + " bytes, expected " +
                             std::to_string(o.region_size));
    return rep;
  }
  std::vector<std::byte> model(o.region_size);
  fill_stream(o.seed, 0, model);

  struct Op {
    bool put;
    uint64_t index, off;
    std::vector<std::byte> buf;
    Request r;
  };
  std::list<Op> inflight;
  auto name = [](const Op& op) {
    return std::string(op.put ? "put" : "get") + " #" + std::to_string(op.index) + " (" +
           std::to_string(op.buf.size()) + " bytes at " + std::to_string(op.off) + ")";
  };
  auto retire = [&](const Op& op) -> std::string {
    const Status s = op.r.wait(o.timeout);
    if (!s.is_ok()) return name(op) + ": " + describe(s);
    if (op.put) return {};
    // No put overlapping this get was posted while it was in flight: the model
    // still holds what it must have read.
    const auto d = byte_diff(op.buf, std::span<const std::byte>(model).subspan(op.off, op.buf.size()));
    return d.empty() ? d : name(op) + " read wrong data: " + d;
  };
  auto abandon = [&](std::string why) {
    ep.close();
    for (const Op& op : inflight) (void)op.r.wait(o.timeout);
    rep.error = std::move(why);
    return rep;
  };

  Rng rng(o.seed * 31 + 7);
  for (uint64_t i = 0; i < o.count; ++i) {
    const bool put = rng.unit() < 0.55;
    const size_t n = std::min(pick_size(rng, o.max_size), o.region_size);
    const uint64_t off = rng.uniform(0, o.region_size - n);
    for (auto it = inflight.begin(); it != inflight.end();) {
      if ((put || it->put) && overlaps(off, n, it->off, it->buf.size())) {
        if (auto e = retire(*it); !e.empty()) return abandon(e);
        it = inflight.erase(it);
      } else {
        ++it;
      }
    }
    if (inflight.size() >= o.window) {
      if (auto e = retire(inflight.front()); !e.empty()) return abandon(e);
      inflight.pop_front();
    }
    Op& op = inflight.emplace_back(Op{put, i, off, std::vector<std::byte>(n), {}});
    if (put) {
      fill_stream(mix(o.seed, i), 0, op.buf);
      std::copy(op.buf.begin(), op.buf.end(), model.begin() + static_cast<ptrdiff_t>(off));
      op.r = ep.put(op.buf, key, off);
      ++rep.puts;
      rep.bytes_put += n;
    } else {
      op.r = ep.get(op.buf, key, off);
      ++rep.gets;
      rep.bytes_got += n;
    }
  }
  while (!inflight.empty()) {
    if (auto e = retire(inflight.front()); !e.empty()) return abandon(e);
    inflight.pop_front();
  }
  if (const Status s = ep.flush().wait(o.timeout); !s.is_ok()) return abandon("flush: " + describe(s));

  // The whole region read back, and the target's own view of it.
  std::vector<std::byte> all(o.region_size);
  Request whole = ep.get(all, key, 0);
  if (const Status s = whole.wait(o.timeout); !s.is_ok()) {
    ep.close();
    (void)whole.wait(o.timeout);
    rep.error = "get of the whole region: " + describe(s);
    return rep;
  }
  if (auto d = byte_diff(all, model); !d.empty()) {
    rep.error = fail(ep, "the whole region read back differs from the model: " + d);
    return rep;
  }
  uint64_t hash = 0;
  if (rep.error = command(ep, {.op = kCmdHash}, &hash, o.timeout); !rep.error.empty()) return rep;
  if (hash != XXH3_64bits(model.data(), model.size())) {
    rep.error = fail(ep, "the target hashes its region to " + hex64(hash) + ", the model to " +
                             hex64(XXH3_64bits(model.data(), model.size())));
    return rep;
  }
  rep.error = done(ep, o.timeout);
  rep.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return rep;
}

std::unique_ptr<RmaBurst> start_rma_burst(Endpoint& ep, const RemoteKey& key, size_t region_size, size_t count,
                                          uint64_t seed) {
  auto b = std::make_unique<RmaBurst>();
  Rng rng(seed);
  b->buffers.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t n = std::min<size_t>(rng.uniform(0, 1 << 20), region_size);
    b->buffers.emplace_back(n);
    fill_stream(seed + i, 0, b->buffers.back());
  }
  for (size_t i = 0; i < count; ++i) {
    const uint64_t off = rng.uniform(0, region_size - b->buffers[i].size());
    b->requests.push_back(i % 2 ? ep.get(b->buffers[i], key, off) : ep.put(b->buffers[i], key, off));
  }
  return b;
}

// --- (b) --------------------------------------------------------------------------

uint64_t atomics_addend(uint32_t rank) { return 0x100000001ull * (rank + 1) + (uint64_t{rank} << 48); }

std::string atomics_target(Context& ctx, const std::vector<std::shared_ptr<Endpoint>>& eps, const AtomicsOptions& o) {
  constexpr uint64_t kSentinel = 0xA5A5A5A5A5A5A5A5ull;
  // Word 0 and 4..7 are outside the key's window (bytes 8..31) and must never change.
  std::vector<uint64_t> words = {kSentinel, 0, 0, 0, kSentinel, kSentinel, kSentinel, kSentinel};
  auto reg = ctx.register_memory(words.data(), words.size() * 8, Access::kRemoteAtomic | Access::kRemoteRead);
  if (!reg) return "register_memory: " + describe(reg.status());
  const Region region = std::move(reg).value();
  auto key = region.remote_key(8, 24, Access::kRemoteAtomic);
  if (!key) return "remote_key: " + describe(key.status());
  auto close_all = [&](std::string why) {
    for (const auto& ep : eps) ep->close();
    return why;
  };
  for (const auto& ep : eps) {
    if (auto e = send_key(*ep, *key, o.timeout); !e.empty()) return close_all(e);
  }
  // Every initiator reports once it is done (all its atomics completed).
  uint64_t sum = 0, sumsq = 0, attempts = 0;
  std::vector<bool> ranks(eps.size(), false);
  for (const auto& ep : eps) {
    Command cmd;
    if (auto e = recv_command(*ep, &cmd, o.timeout); !e.empty()) return close_all(e);
    if (cmd.op != kCmdReport || cmd.a >= eps.size() || ranks[cmd.a]) return close_all("bad report");
    ranks[cmd.a] = true;
    sum += cmd.b;
    sumsq += cmd.c;
    attempts += cmd.d;
  }
  std::string error;
  auto check = [&](const char* what, uint64_t got, uint64_t want) {
    if (got != want && error.empty()) {
      error = std::string(what) + ": " + std::to_string(got) + ", expected " + std::to_string(want);
    }
  };
  const uint64_t n = eps.size(), total = n * o.count;
  uint64_t addends = 0;
  for (uint32_t r = 0; r < n; ++r) addends += atomics_addend(r) * o.count;
  uint64_t want_sum = 0, want_sumsq = 0;
  for (uint64_t k = 0; k < total; ++k) {
    want_sum += k;
    want_sumsq += k * k;
  }
  check("word 1 (fetch_add 1 from every initiator)", std::atomic_ref(words[1]).load(), total);
  check("word 2 (fetch_add of per-initiator addends)", std::atomic_ref(words[2]).load(), addends);
  check("word 3 (compare_swap increments)", std::atomic_ref(words[3]).load(), n * o.cas_count);
  check("sum of the old values fetch_add returned", sum, want_sum);
  check("sum of their squares", sumsq, want_sumsq);
  for (size_t w : {size_t{0}, size_t{4}, size_t{5}, size_t{6}, size_t{7}}) {
    check("a word outside the key's window", std::atomic_ref(words[w]).load(), kSentinel);
  }
  for (const auto& ep : eps) {
    if (auto e = send_reply(*ep, error.empty() ? 0 : 1, o.timeout); !e.empty() && error.empty()) error = e;
  }
  std::fprintf(stderr, "atomics target: %llu compare_swap attempts for %llu increments\n",
               static_cast<unsigned long long>(attempts), static_cast<unsigned long long>(n * o.cas_count));
  return error;
}

std::string atomics_initiator(Endpoint& ep, uint32_t rank, const AtomicsOptions& o) {
  RemoteKey key;
  if (auto e = recv_key(ep, &key, o.timeout); !e.empty()) return e;
  const uint64_t addend = atomics_addend(rank), total = o.initiators * o.count;
  std::vector<uint64_t> olds(o.count, ~uint64_t{0});
  constexpr size_t kBatch = 128;
  for (size_t base = 0; base < o.count; base += kBatch) {
    std::vector<Request> reqs;
    for (size_t i = base; i < std::min(o.count, base + kBatch); ++i) {
      reqs.push_back(ep.fetch_add(&olds[i], key, 0, 1));
      reqs.push_back(ep.fetch_add(nullptr, key, 8, addend));
    }
    if (const Status s = wait_all(reqs, o.timeout); !s.is_ok()) {
      ep.close();
      (void)wait_all(reqs, o.timeout);
      return "fetch_add batch at " + std::to_string(base) + ": " + describe(s);
    }
  }
  // Our atomics execute in posting order and every addend is positive, so the old
  // values we saw strictly increase; all of them are below the grand total.
  uint64_t sum = 0, sumsq = 0;
  for (size_t i = 0; i < o.count; ++i) {
    if (olds[i] >= total || (i > 0 && olds[i] <= olds[i - 1])) {
      return fail(ep, "fetch_add #" + std::to_string(i) + " returned " + std::to_string(olds[i]) + " after " +
                          (i > 0 ? std::to_string(olds[i - 1]) : std::string("nothing")));
    }
    sum += olds[i];
    sumsq += olds[i] * olds[i];
  }
  // compare_swap increments in a CAS loop, racing the other initiators.
  uint64_t expected = 0, attempts = 0;
  for (size_t done_count = 0; done_count < o.cas_count;) {
    uint64_t old = ~uint64_t{0};
    if (const Status s = ep.compare_swap(&old, key, 16, {.expected = expected, .desired = expected + 1}).wait(o.timeout); !s.is_ok()) {
      return fail(ep, "compare_swap: " + describe(s));
    }
    if (++attempts > 1000 * o.cas_count) return fail(ep, "compare_swap loop does not converge");
    if (old == expected) {
      ++done_count;
      ++expected;
    } else if (old < expected) {
      return fail(ep, "compare_swap saw the counter go back from " + std::to_string(expected) + " to " +
                          std::to_string(old));
    } else {
      expected = old;
    }
  }
  if (const Status s = ep.flush().wait(o.timeout); !s.is_ok()) return fail(ep, "flush: " + describe(s));
  uint64_t verdict = 1;
  if (auto e = command(ep, {.op = kCmdReport, .a = rank, .b = sum, .c = sumsq, .d = attempts}, &verdict, o.timeout);
      !e.empty()) {
    return e;
  }
  return verdict == 0 ? std::string() : "the target found the totals wrong (its report says how)";
}

// --- (c) --------------------------------------------------------------------------

namespace {

struct NotifyPut {
  uint32_t region;
  uint64_t off, len, value;
};
struct NotifyPlan {
  std::vector<NotifyPut> puts;
  uint64_t region_size[2] = {0, 0};
};

NotifyPlan make_notify_plan(const NotifyOptions& o) {
  NotifyPlan p;
  Rng rng(o.seed ^ 0x6E6F74696679ull);
  uint64_t next[2] = {0, 0};
  for (uint64_t i = 0; i < o.count; ++i) {
    const double u = rng.unit();
    uint64_t len = 0;
    if (u < 0.3) {
      len = rng.uniform(0, 16);
    } else if (u < 0.5) {
      len = rng.uniform(16384 - 2, 16384 + 2);
    } else if (u < 0.95) {
      len = rng.uniform(0, 64 * 1024);
    } else {
      len = rng.uniform(0, 600 * 1024);
    }
    const auto region = static_cast<uint32_t>(rng.next() & 1);
    const uint64_t off = next[region] + rng.uniform(0, 15);
    next[region] = off + len;
    p.puts.push_back({region, off, len, (rng.next() << 20) | i});
  }
  for (int r = 0; r < 2; ++r) p.region_size[r] = next[r] + 16;
  return p;
}

}  // namespace

std::string notify_target(Context& ctx, Endpoint& ep, const NotifyOptions& o) {
  if (o.count >= (1u << 20)) return "count must stay below 2^20";
  const NotifyPlan plan = make_notify_plan(o);
  std::vector<std::byte> mem[2] = {std::vector<std::byte>(plan.region_size[0]),
                                   std::vector<std::byte>(plan.region_size[1])};
  Region regions[2];  // declared after `mem`: deregistered before it is freed
  for (int r = 0; r < 2; ++r) {
    auto reg = ctx.register_memory(mem[r].data(), mem[r].size(), Access::kRemoteWrite);
    if (!reg) return "register_memory: " + describe(reg.status());
    regions[r] = std::move(reg).value();
  }
  for (const Region& r : regions) {
    if (auto e = send_key(ep, r.remote_key(), o.timeout); !e.empty()) return fail(ep, e);
  }
  std::vector<bool> seen(o.count, false);
  for (size_t k = 0; k < o.count; ++k) {
    Result<Notification> n = ep.wait_notification(o.timeout);
    if (!n) return fail(ep, "notification " + std::to_string(k) + " of " + std::to_string(o.count) + ": " + describe(n.status()));
    const uint64_t i = n->value & 0xFFFFF;
    if (i >= o.count || plan.puts[i].value != n->value) return fail(ep, "unknown notification value " + hex64(n->value));
    if (seen[i]) return fail(ep, "notification of put #" + std::to_string(i) + " delivered twice");
    seen[i] = true;
    const NotifyPut& p = plan.puts[i];
    const std::string what = "put #" + std::to_string(i) + " (" + std::to_string(p.len) + " bytes at " +
                             std::to_string(p.off) + " of region " + std::to_string(p.region) + ")";
    if (n->region != regions[p.region].id()) return fail(ep, what + ": notification names another region");
    if (n->offset != p.off || n->length != p.len) {
      return fail(ep, what + ": notification says " + std::to_string(n->length) + " bytes at " + std::to_string(n->offset));
    }
    const size_t at = first_mismatch(p.value, 0, std::span<const std::byte>(mem[p.region]).subspan(p.off, p.len));
    if (at != SIZE_MAX) return fail(ep, what + ": notified before its data: byte " + std::to_string(at) + " not written yet");
  }
  Command cmd;
  if (auto e = recv_command(ep, &cmd, o.timeout); !e.empty()) return e;
  if (cmd.op != kCmdDone) return fail(ep, "expected DONE");
  // Every put completed before DONE was sent; nothing more may come.
  if (auto extra = ep.poll_notification()) return fail(ep, "an extra notification " + hex64(extra->value));
  const EndpointStats st = ep.stats();
  if (st.notifications != o.count) {
    return fail(ep, "stats().notifications = " + std::to_string(st.notifications) + ", expected " + std::to_string(o.count));
  }
  return send_reply(ep, 0, o.timeout);
}

std::string notify_initiator(Endpoint& ep, const NotifyOptions& o) {
  RemoteKey keys[2];
  for (RemoteKey& k : keys) {
    if (auto e = recv_key(ep, &k, o.timeout); !e.empty()) return e;
  }
  const NotifyPlan plan = make_notify_plan(o);
  struct Op {
    size_t index;
    std::vector<std::byte> buf;
    Request r;
  };
  std::list<Op> inflight;
  auto retire = [&]() -> std::string {
    const Op& op = inflight.front();
    const Status s = op.r.wait(o.timeout);
    if (!s.is_ok()) {
      ep.close();
      for (const Op& x : inflight) (void)x.r.wait(o.timeout);
      return "notified put #" + std::to_string(op.index) + ": " + describe(s);
    }
    inflight.pop_front();
    return {};
  };
  for (size_t i = 0; i < plan.puts.size(); ++i) {
    if (inflight.size() >= o.window) {
      if (auto e = retire(); !e.empty()) return e;
    }
    const NotifyPut& p = plan.puts[i];
    Op& op = inflight.emplace_back(Op{i, std::vector<std::byte>(p.len), {}});
    fill_stream(p.value, 0, op.buf);
    op.r = ep.put(op.buf, keys[p.region], p.off, {.notify = p.value});
  }
  while (!inflight.empty()) {
    if (auto e = retire(); !e.empty()) return e;
  }
  return done(ep, o.timeout);
}

// --- (d) --------------------------------------------------------------------------

std::string flush_target(Context& ctx, Endpoint& ep, const FlushOptions& o) {
  GuardedBuffer mem(o.region_size);
  if (!mem.ok()) return "mmap failed";
  std::memset(mem.data(), 0, mem.size());
  std::vector<uint64_t> counter(1, 0);
  auto reg = ctx.register_memory(mem.data(), mem.size(), Access::kRemoteWrite);
  if (!reg) return "register_memory: " + describe(reg.status());
  const Region region = std::move(reg).value();
  auto creg = ctx.register_memory(counter.data(), 8, Access::kRemoteAtomic);
  if (!creg) return "register_memory: " + describe(creg.status());
  const Region counter_region = std::move(creg).value();
  if (auto e = send_key(ep, region.remote_key(), o.timeout); !e.empty()) return fail(ep, e);
  if (auto e = send_key(ep, counter_region.remote_key(), o.timeout); !e.empty()) return fail(ep, e);
  return serve(ep, o.timeout, [&](const Command& cmd, uint64_t* reply) -> std::string {
    if (cmd.op != kCmdVerify) return "unexpected command " + std::to_string(cmd.op);
    // Checked the moment VERIFY arrives: the flush before it promised every byte.
    const size_t at = first_mismatch(o.seed + cmd.a, 0, mem.span());
    const uint64_t count = std::atomic_ref(counter[0]).load();
    *reply = 1;
    if (at != SIZE_MAX) {
      return "round " + std::to_string(cmd.a) + ": VERIFY arrived after the flush but byte " + std::to_string(at) +
             " of " + std::to_string(mem.size()) + " holds older data";
    }
    if (count != cmd.b) {
      return "round " + std::to_string(cmd.a) + ": VERIFY arrived after the flush but the counter is " +
             std::to_string(count) + ", expected " + std::to_string(cmd.b);
    }
    *reply = 0;
    return {};
  });
}

std::string flush_initiator(Endpoint& ep, const FlushOptions& o) {
  RemoteKey key, counter_key;
  if (auto e = recv_key(ep, &key, o.timeout); !e.empty()) return e;
  if (auto e = recv_key(ep, &counter_key, o.timeout); !e.empty()) return e;
  std::vector<std::byte> src(o.region_size);
  uint64_t atomics = 0;
  for (uint64_t round = 1; round <= o.rounds; ++round) {
    fill_stream(o.seed + round, 0, src);
    Rng rng(o.seed * 7 + round);
    size_t puts = 0;
    for (uint64_t off = 0; off < src.size();) {
      const double u = rng.unit();
      const size_t want = u < 0.4 ? rng.uniform(0, 2000) : u < 0.85 ? rng.uniform(0, 100000) : rng.uniform(0, 1500000);
      const size_t n = std::min<size_t>(want, src.size() - off);
      // Fire and forget: only the flush is waited for.
      (void)ep.put(std::span<const std::byte>(src).subspan(off, n), key, off);
      if (puts++ % 4 == 0) {
        (void)ep.fetch_add(nullptr, counter_key, 0, 1);
        ++atomics;
      }
      off += n;
    }
    Request f = ep.flush();
    if (const Status s = f.wait(o.timeout); !s.is_ok()) {
      ep.close();
      (void)f.wait(o.timeout);
      return "round " + std::to_string(round) + ": flush: " + describe(s);
    }
    uint64_t verdict = 1;
    if (auto e = command(ep, {.op = kCmdVerify, .a = round, .b = atomics}, &verdict, o.timeout); !e.empty()) return e;
    if (verdict != 0) return "round " + std::to_string(round) + ": the target found data missing after the flush";
  }
  return done(ep, o.timeout);
}

}  // namespace remora::itest
