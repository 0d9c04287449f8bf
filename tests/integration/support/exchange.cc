#include "support/exchange.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "remora/request.h"
#include "remora/status.h"

namespace remora::itest {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::byte kPoison{0xA5};

std::string describe(const Status& s) { return std::string(to_string(s.code())) + " (" + s.message() + ")"; }

// Endpoint counters, for timeout reports ("where did it stop?").
std::string stats_summary(const Endpoint& ep) {
  const EndpointStats st = ep.stats();
  std::string per;
  for (uint64_t n : st.chunks_per_stream) {
    if (!per.empty()) per += ',';
    per += std::to_string(n);
  }
  return "[endpoint stats: sent " + std::to_string(st.messages_sent) + " msgs/" + std::to_string(st.bytes_sent) +
         " B (eager " + std::to_string(st.eager_sent) + ", rendezvous " + std::to_string(st.rendezvous_sent) +
         ", chunks " + std::to_string(st.chunks_sent) + " = " + per + "), received " +
         std::to_string(st.messages_received) + " msgs/" + std::to_string(st.bytes_received) + " B]";
}

struct Shared {
  Endpoint& ep;
  Clock::time_point deadline;
  std::mutex mu;
  std::string error;
  std::atomic<bool> stop{false};

  void fail(std::string why) {
    {
      std::lock_guard lock(mu);
      if (!error.empty()) return;
      error = std::move(why);
    }
    stop = true;
    ep.close();  // every outstanding request now fails with kAborted
  }
  bool timed_out() const { return Clock::now() >= deadline; }
};

struct PendingSend {
  Request r;
  const MessageSpec* m;
};

struct PendingRecv {
  Request r;
  const MessageSpec* m;
  std::unique_ptr<std::byte[]> buf;
  size_t len;
};

// Waits up to 10 s for each still-outstanding request after a failure (the endpoint is
// closed by then, so they must complete with kAborted). Buffers of requests that do not
// complete are leaked rather than freed under the library.
template <typename P>
void drain_after_failure(Shared& sh, std::list<P>& pending, const char* what) {
  const auto limit = Clock::now() + std::chrono::seconds(10);
  for (auto& p : pending) {
    const auto left = std::max(Clock::duration::zero(), limit - Clock::now());
    if (p.r.wait(left).code() == StatusCode::kTimeout || !p.r.done()) {
      sh.fail("a " + std::string(what) + " did not complete within 10 s after Endpoint::close()");
      if constexpr (std::is_same_v<P, PendingRecv>) (void)p.buf.release();
    }
  }
  pending.clear();
}

void send_loop(Shared& sh, const Plan& out, size_t window, ExchangeReport& rep) {
  std::list<PendingSend> pending;
  auto check = [&](PendingSend& p, const Status& s) {
    if (!s.is_ok()) {
      sh.fail("send #" + std::to_string(p.m->index) + " (" + std::to_string(p.m->size) + " bytes) failed: " + describe(s));
      return false;
    }
    if (p.r.bytes() != p.m->size) {
      sh.fail("send #" + std::to_string(p.m->index) + ": bytes() = " + std::to_string(p.r.bytes()) + ", expected " +
              std::to_string(p.m->size));
      return false;
    }
    ++rep.sent;
    rep.bytes_sent += p.m->size;
    return true;
  };
  // Reaps completed sends (any order); if none is done, waits on the oldest a little.
  auto reap = [&]() {
    bool any = false;
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->r.done()) {
        if (!check(*it, it->r.wait(std::chrono::seconds(0)))) return;
        it = pending.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    if (any || pending.empty()) return;
    if (sh.timed_out()) {
      sh.fail("exchange timed out with " + std::to_string(pending.size()) + " sends outstanding (oldest #" +
              std::to_string(pending.front().m->index) + ", " + std::to_string(pending.front().m->size) + " bytes) " +
              stats_summary(sh.ep));
      return;
    }
    const Status s = pending.front().r.wait(std::chrono::milliseconds(200));
    if (s.code() == StatusCode::kTimeout) return;
    if (check(pending.front(), s)) pending.pop_front();
  };
  for (const MessageSpec& m : out.messages) {
    while (!sh.stop && pending.size() >= window) reap();
    if (sh.stop) break;
    pending.push_back({sh.ep.send(out.content(m), m.tag), &m});
  }
  while (!sh.stop && !pending.empty()) reap();
  if (sh.stop) drain_after_failure(sh, pending, "send");
}

void recv_loop(Shared& sh, const Plan& in, size_t window, ExchangeReport& rep) {
  std::list<PendingRecv> pending;
  auto check = [&](PendingRecv& p, const Status& s) {
    const MessageSpec& m = *p.m;
    const std::string name = "recv #" + std::to_string(m.index) + " (tag " +
                             std::to_string(static_cast<uint64_t>(m.tag)) + ", " + std::to_string(m.size) + " bytes)";
    if (!s.is_ok()) {
      sh.fail(name + " failed: " + describe(s));
      return false;
    }
    if (p.r.bytes() != m.size) {
      sh.fail(name + ": bytes() = " + std::to_string(p.r.bytes()));
      return false;
    }
    if (p.r.tag() != m.tag) {
      sh.fail(name + ": tag() = " + std::to_string(static_cast<uint64_t>(p.r.tag())));
      return false;
    }
    const auto expect = in.content(m);
    if (m.size != 0 && std::memcmp(p.buf.get(), expect.data(), m.size) != 0) {
      size_t i = 0;
      while (p.buf[i] == expect[i]) ++i;
      size_t bad = 0;
      for (size_t j = i; j < m.size; ++j) bad += p.buf[j] != expect[j];
      sh.fail(name + ": content differs from byte " + std::to_string(i) + " on (" + std::to_string(bad) +
              " bytes differ) — wrong data, misplaced chunk or out-of-order match");
      return false;
    }
    for (size_t j = m.size; j < p.len; ++j) {
      if (p.buf[j] != kPoison) {
        sh.fail(name + ": receive buffer written past the message end at byte " + std::to_string(j));
        return false;
      }
    }
    ++rep.received;
    rep.bytes_received += m.size;
    return true;
  };
  auto reap = [&]() {
    bool any = false;
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->r.done()) {
        if (!check(*it, it->r.wait(std::chrono::seconds(0)))) return;
        it = pending.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    if (any || pending.empty()) return;
    if (sh.timed_out()) {
      sh.fail("exchange timed out with " + std::to_string(pending.size()) + " receives outstanding (oldest #" +
              std::to_string(pending.front().m->index) + ", " + std::to_string(pending.front().m->size) +
              " bytes); received " + std::to_string(rep.received) + "/" + std::to_string(in.messages.size()) + " " +
              stats_summary(sh.ep));
      return;
    }
    const Status s = pending.front().r.wait(std::chrono::milliseconds(200));
    if (s.code() == StatusCode::kTimeout) return;
    if (check(pending.front(), s)) pending.pop_front();
  };
  for (const MessageSpec& m : in.messages) {
    while (!sh.stop && pending.size() >= window) reap();
    if (sh.stop) break;
    const size_t len = m.size + m.recv_slack;
    auto buf = std::make_unique_for_overwrite<std::byte[]>(std::max<size_t>(len, 1));
    std::memset(buf.get(), static_cast<int>(kPoison), len);
    Request r = sh.ep.recv(std::span<std::byte>(buf.get(), len), m.tag);
    pending.push_back({std::move(r), &m, std::move(buf), len});
  }
  while (!sh.stop && !pending.empty()) reap();
  if (sh.stop) drain_after_failure(sh, pending, "recv");
}

}  // namespace

ExchangeReport run_exchange(Endpoint& ep, const Plan& out, const Plan& in, const ExchangeOptions& options) {
  ExchangeReport rep;
  const auto start = Clock::now();
  Shared sh{ep, start + options.timeout, {}, {}, {}};
  ExchangeReport send_rep, recv_rep;
  std::thread sender([&] { send_loop(sh, out, options.send_window, send_rep); });
  recv_loop(sh, in, options.recv_window, recv_rep);
  sender.join();
  rep.error = sh.error;
  rep.sent = send_rep.sent;
  rep.bytes_sent = send_rep.bytes_sent;
  rep.received = recv_rep.received;
  rep.bytes_received = recv_rep.bytes_received;
  rep.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return rep;
}

std::string close_handshake(Endpoint& ep, bool initiator, std::chrono::milliseconds timeout) {
  std::byte dummy[8] = {};
  auto fail = [](const char* what, const Status& s) { return std::string(what) + ": " + describe(s); };
  if (initiator) {
    Request ack = ep.recv(std::span<std::byte>(dummy), kFinAckTag);
    Status s = ep.send({}, kFinTag).wait(timeout);
    if (!s.is_ok()) return fail("closing handshake: FIN send", s);
    s = ack.wait(timeout);
    if (!s.is_ok()) return fail("closing handshake: waiting for FIN_ACK", s);
    ep.close();
    return {};
  }
  Request fin = ep.recv(std::span<std::byte>(dummy), kFinTag);
  Status s = fin.wait(timeout);
  if (!s.is_ok()) return fail("closing handshake: waiting for FIN", s);
  Request end = ep.recv(std::span<std::byte>(dummy), kNeverTag);
  s = ep.send({}, kFinAckTag).wait(timeout);
  if (!s.is_ok()) return fail("closing handshake: FIN_ACK send", s);
  // The initiator closes right after FIN_ACK; noticing that takes milliseconds.
  s = end.wait(std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10)));
  if (s.code() != StatusCode::kAborted && s.code() != StatusCode::kPeerFailed) {
    return fail("closing handshake: after the peer closed, a pending receive should fail with aborted/peer_failed, got", s);
  }
  return {};
}

}  // namespace remora::itest
