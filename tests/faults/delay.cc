// tests/faults/delay.cc — `remora_faults delay --queue=N --ms=D`: a fixed delay for every
// packet iptables sends to NFQUEUE N, held here D ms and then accepted, in arrival
// order. The matrix's "50 ms delay" cell uses it because this kernel has no netem (and
// no fq, which a BPF program setting departure times would need). Prints "READY" once
// bound; runs until killed. A packet the queue cannot take (full, or this process
// gone) is dropped by the kernel, which TCP recovers like any loss.
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

extern "C" {
#include <libnetfilter_queue/libnetfilter_queue.h>
}

#include "faults.h"
#include "support/peer_program.h"

namespace remora::faults {
namespace {

using Clock = std::chrono::steady_clock;

struct Held {
  uint32_t id;
  Clock::time_point due;
};

struct DelayState {
  std::chrono::milliseconds delay{50};
  std::deque<Held> held;
};

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* nfa, void* data) {
  auto* state = static_cast<DelayState*>(data);
  const nfqnl_msg_packet_hdr* hdr = nfq_get_msg_packet_hdr(nfa);
  if (hdr != nullptr) state->held.push_back({ntohl(hdr->packet_id), Clock::now() + state->delay});
  return 0;
}

}  // namespace

int delay_main(int argc, char** argv) {
  itest::Flags f(argc, argv);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  DelayState state;
  state.delay = std::chrono::milliseconds(f.num("ms", 50));
  nfq_handle* h = nfq_open();
  if (h == nullptr) itest::die("nfq_open failed (needs CAP_NET_ADMIN and nfnetlink_queue)");
  nfq_q_handle* qh = nfq_create_queue(h, static_cast<uint16_t>(f.num("queue", 0)), &on_packet, &state);
  if (qh == nullptr) itest::die("nfq_create_queue failed (queue taken?)");
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) itest::die("nfq_set_mode failed");
  (void)nfq_set_queue_maxlen(qh, 1 << 16);
  (void)nfnl_rcvbufsiz(nfq_nfnlh(h), 32 << 20);
  const int fd = nfq_fd(h);
  std::printf("READY\n");
  std::fflush(stdout);
  std::vector<char> buf(1 << 16);
  for (;;) {
    int timeout_ms = -1;
    if (!state.held.empty()) {
      const auto left = state.held.front().due - Clock::now();
      timeout_ms = left.count() <= 0 ? 0 : static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
    }
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, timeout_ms) > 0) {
      // ENOBUFS (the kernel could not queue a message to us) loses packets: TCP resends.
      const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n > 0) nfq_handle_packet(h, buf.data(), static_cast<int>(n));
    }
    const auto now = Clock::now();
    while (!state.held.empty() && state.held.front().due <= now) {
      nfq_set_verdict(qh, state.held.front().id, NF_ACCEPT, 0, nullptr);
      state.held.pop_front();
    }
  }
}

}  // namespace remora::faults
