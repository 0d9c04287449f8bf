// `remora rxq` end to end, with real processes, in a network namespace with a veth pair:
//  - on veth and the namespace's loopback (no header split, no ntuple, no RSS: the only
//    interfaces this kernel can make) `rxq serve` and `rxq check` refuse with the kernel's
//    reasons, exit 3, and change nothing: every `ethtool` view of the interface and
//    `ip -d link` are the same before and after, and no journal or socket is left;
//  - in the test-only stand-in mode (a memfd stands in for the dmabuf, the interface is
//    left alone) the Unix-socket protocol runs for real: a client process and this test
//    get the buffer's descriptor by SCM_RIGHTS and read what rxq wrote into it; each flow
//    is journalled with its client's pid (SO_PEERCRED) and the kernel's refusal of its
//    rule; a malformed request is refused with the decoder's reason; a SIGKILLed client's
//    flows leave the journal; SIGTERM undoes everything and removes journal and socket;
//    after a SIGKILL of rxq the journal stays, a new `serve` refuses to start over it,
//    and `rxq undo` replays it and removes it;
//  - with `--client-queues`, a client's own dmabuf (BIND_DMABUF) or a queue reserved for
//    its own io_uring zcrx (RESERVE_QUEUE) takes a client queue of its own, where its
//    flows go with no descriptor; every refusal comes with its errno and reason, and the
//    queue is free again when the client goes.
#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/netns.h"
#include "support/process.h"
#include "zerocopy/rxq_client.h"
#include "zerocopy/rxq_protocol.h"

namespace remora::itest {
namespace {

namespace rq = remora::zerocopy::rxq;
using std::chrono::seconds;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Rxq : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/remora-rxq-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/rxq.sock";
    journal_ = dir_ + "/rxq.journal";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// `remora rxq <args>` inside `ns` ("" for this namespace).
  std::vector<std::string> rxq(const NetnsPair& net, const std::string& ns, std::vector<std::string> args) const {
    std::vector<std::string> argv = ns.empty() ? std::vector<std::string>{} : net.exec_prefix(ns);
    argv.push_back(REMORA_TOOL_PATH);
    argv.push_back("rxq");
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  /// Everything ethtool and ip say about `ifname` in `ns`, for a before/after comparison.
  std::string snapshot(const NetnsPair& net, const std::string& ns, const std::string& ifname) const {
    std::string all;
    for (const char* opt : {"-g", "-k", "-l", "-x", "-n", "-i"}) {
      auto argv = net.exec_prefix(ns);
      argv.insert(argv.end(), {"ethtool", opt, ifname});
      all += run_command(argv, seconds(10)).output;
    }
    auto argv = net.exec_prefix(ns);
    argv.insert(argv.end(), {"ip", "-d", "link", "show", ifname});
    // ip names the peer's namespace by walking every named one, and says "Error: Peer
    // netns reference is invalid." when another test's namespace goes away meanwhile
    // (tests run two at a time): that line is about the walk, not this interface.
    std::istringstream link(run_command(argv, seconds(10)).output);
    for (std::string line; std::getline(link, line);) {
      if (!line.starts_with("Error: Peer netns reference is invalid")) all += line + "\n";
    }
    return all;
  }

  /// Reads `p`'s lines until one contains `want`; all lines read so far in `*seen`.
  bool read_until(Process& p, const std::string& want, std::string* seen) {
    for (;;) {
      auto line = p.read_line(std::chrono::milliseconds(30000));
      if (!line) return false;
      *seen += *line + "\n";
      if (line->find(want) != std::string::npos) return true;
    }
  }

  std::string dir_, socket_, journal_;
};

TEST_F(Rxq, RefusesOnVethAndLoopbackWithTheReasonsAndChangesNothing) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  for (const std::string ifname : {"rmr0", "lo"}) {
    SCOPED_TRACE(ifname);
    const std::string before = snapshot(net, net.ns_a(), ifname);
    ASSERT_NE(before.find("Features for " + ifname), std::string::npos) << before;  // ethtool ran
    const CommandResult serve = run_command(
        rxq(net, net.ns_a(),
            {"serve", "--ifname", ifname, "--queues", "1", "--socket", socket_, "--journal", journal_}),
        seconds(60));
    ASSERT_TRUE(WIFEXITED(serve.status)) << serve.output;
    EXPECT_EQ(WEXITSTATUS(serve.status), 3) << serve.output;
    const std::string& out = serve.output;
    EXPECT_NE(out.find("cannot be a devmem receive interface (the reasons are above); nothing was changed."),
              std::string::npos)
        << out;
    // The doctor's answers, with the kernel's words, and rxq's own.
    EXPECT_NE(out.find("header split"), std::string::npos) << out;
    EXPECT_NE(out.find("header-split threshold   yes     the driver reports none"), std::string::npos) << out;
    EXPECT_NE(out.find("ntuple flow steering     no      rx-ntuple-filter: off [fixed]"), std::string::npos) << out;
    EXPECT_NE(out.find("SIOCETHTOOL ETHTOOL_GRXRINGS (RX ring count) on " + ifname +
                       ": the kernel refused: EOPNOTSUPP"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("kernel: EOPNOTSUPP (Operation not supported)"), std::string::npos) << out;
    EXPECT_NE(out.find("SIOCETHTOOL ETHTOOL_GRXFHINDIR"), std::string::npos) << out;
    EXPECT_FALSE(std::filesystem::exists(journal_));
    EXPECT_FALSE(std::filesystem::exists(socket_));
    EXPECT_EQ(snapshot(net, net.ns_a(), ifname), before);

    const CommandResult check = run_command(rxq(net, net.ns_a(), {"check", "--ifname", ifname}), seconds(60));
    ASSERT_TRUE(WIFEXITED(check.status)) << check.output;
    EXPECT_EQ(WEXITSTATUS(check.status), 3) << check.output;
    EXPECT_NE(check.output.find(ifname + " cannot be a devmem receive interface."), std::string::npos)
        << check.output;
    EXPECT_EQ(snapshot(net, net.ns_a(), ifname), before);
  }
  const CommandResult none = run_command(rxq(net, net.ns_a(), {"check", "--ifname", "nosuch0"}), seconds(60));
  EXPECT_EQ(WEXITSTATUS(none.status), 1) << none.output;
  EXPECT_NE(none.output.find("no network interface 'nosuch0'"), std::string::npos) << none.output;
}

TEST_F(Rxq, StandinServesFlowsPassesTheBufferAndCleansUpAfterClients) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  const std::string before = snapshot(net, net.ns_a(), "rmr0");
  Process serve({.argv = rxq(net, net.ns_a(),
                             {"serve", "--standin", "--ifname", "rmr0", "--queues", "2", "--socket", socket_,
                              "--journal", journal_, "--dmabuf-size", "65536"}),
                 .env = {},
                 .capture_stderr = true});
  ASSERT_TRUE(serve.ok()) << serve.error();
  std::string log;
  ASSERT_TRUE(read_until(serve, "rxq: serving rmr0 queues 0,1 on " + socket_, &log)) << log;
  EXPECT_NE(log.find("bind-rx refused, as expected of a stand-in: devmem bind-rx"), std::string::npos) << log;

  // A client process holds a flow; it reads what rxq wrote into the buffer it was given.
  Process client({.argv = rxq(net, "", {"request", "--socket", socket_, "--port", "5000", "--hold"}),
                  .env = {},
                  .capture_stderr = true,
                  .pipe_stdin = true});
  ASSERT_TRUE(client.ok()) << client.error();
  std::string client_out;
  ASSERT_TRUE(read_until(client, "holding the flow", &client_out)) << client_out;
  EXPECT_NE(client_out.find("rxq request: flow-type tcp4 dst-port 5000: binding 0 queue 0 rule none buffer 65536 "
                            "bytes (stand-in memfd); SIOCETHTOOL ETHTOOL_SRXCLSRLINS (flow-type tcp4 dst-port 5000 "
                            "action 0) on rmr0: the kernel refused: EOPNOTSUPP"),
            std::string::npos)
      << client_out;
  EXPECT_NE(client_out.find("rxq request: buffer starts: remora rxq stand-in buffer: a memfd, not a dmabuf"),
            std::string::npos)
      << client_out;
  const std::string client_entry =
      fmt::format("flow {} 0 none flow-type tcp4 dst-port 5000\n", client.pid());
  EXPECT_NE(slurp(journal_).find(client_entry), std::string::npos) << slurp(journal_);

  // This test is a client too: the descriptor crosses processes and reads the same bytes.
  {
    auto c = rq::Client::connect(socket_);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    zerocopy::TcpFlow flow;
    flow.dst_port = 6000;
    flow.src_port = 40000;
    flow.dst_addr = {10, 199, 0, 1};
    auto lease = c->bind_flow(flow);
    ASSERT_TRUE(lease.is_ok()) << lease.status().to_string();
    EXPECT_EQ(lease->reply.queue, 1u);  // round robin over the reserved queues
    EXPECT_EQ(lease->reply.flags, rq::kFlagStandin | rq::kFlagRuleRefused);
    EXPECT_EQ(lease->reply.dmabuf_size, 65536u);
    char head[16] = {};
    ASSERT_EQ(::pread(lease->dmabuf.get(), head, sizeof head, 0), static_cast<ssize_t>(sizeof head));
    EXPECT_EQ(std::string(head, sizeof head), "remora rxq stand");
    EXPECT_NE(slurp(journal_).find(fmt::format("flow {} 1 none flow-type tcp4 dst-port 6000 src-port 40000 "
                                               "dst-ip 10.199.0.1\n",
                                               ::getpid())),
              std::string::npos)
        << slurp(journal_);

    // A malformed request: refused with the decoder's reason, no descriptor.
    std::vector<std::byte> junk(rq::kRequestBytes, std::byte{0x41});
    ASSERT_TRUE(rq::send_packet(c->fd(), junk).is_ok());
    auto p = rq::recv_packet(c->fd(), rq::kMaxReplyBytes, net::Clock::now() + seconds(30));
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_FALSE(p->fd.valid());
    auto r = rq::decode_reply(p->bytes);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->error, EINVAL);
    EXPECT_NE(r->message.find("bad magic 0x41414141"), std::string::npos) << r->message;
  }  // this client disconnects: its flow goes
  ASSERT_TRUE(read_until(serve, fmt::format("removed client pid {}'s flow-type tcp4 dst-port 6000", ::getpid()), &log))
      << log;

  // The client process dies without a word: rxq sees the hang-up and removes its flow.
  client.kill_and_reap();
  ASSERT_TRUE(read_until(serve, fmt::format("removed client pid {}'s flow-type tcp4 dst-port 5000", client.pid()),
                         &log))
      << log;
  const std::string only_head = slurp(journal_);
  EXPECT_TRUE(only_head.starts_with("remora-rxq-journal 1 rmr0 ")) << only_head;
  EXPECT_EQ(std::count(only_head.begin(), only_head.end(), '\n'), 1) << only_head;

  // SIGTERM: everything undone, journal and socket gone, the interface as it was.
  serve.signal(SIGTERM);
  ASSERT_TRUE(read_until(serve, "stopped; rmr0 is as it was", &log)) << log;
  auto st = serve.wait(seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(Process::exited_ok(*st)) << Process::describe(*st) << "\n" << log;
  EXPECT_FALSE(std::filesystem::exists(journal_));
  EXPECT_FALSE(std::filesystem::exists(socket_));
  EXPECT_EQ(snapshot(net, net.ns_a(), "rmr0"), before);
}

/// A memfd of `size` bytes: what a client hands rxq as "its dmabuf" in stand-in mode.
net::Fd client_buffer(uint64_t size) {
  net::Fd fd(::memfd_create("remora-rxq-test-client", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(size)), 0);
  return fd;
}

TEST_F(Rxq, StandinTakesAClientsOwnDmabufForAQueueOfItsOwnAndFreesItWithTheClient) {
  // TCPX's model: a client hands rxq its own (device) dmabuf; its flows go to a queue
  // bound to that, one queue per such client (--client-queues), freed when it goes.
  Process serve({.argv = {REMORA_TOOL_PATH, "rxq", "serve", "--standin", "--ifname", "lo", "--queues", "1",
                          "--client-queues", "1", "--socket", socket_, "--journal", journal_, "--dmabuf-size", "65536"},
                 .env = {},
                 .capture_stderr = true});
  ASSERT_TRUE(serve.ok()) << serve.error();
  std::string log;
  ASSERT_TRUE(read_until(serve,
                         fmt::format("rxq: serving lo queues 0 on {} (journal {}); queues 1 for clients' own "
                                     "dmabufs",
                                     socket_, journal_),
                         &log))
      << log;
  constexpr uint64_t kSize = 1 << 20;
  zerocopy::TcpFlow flow;
  flow.dst_port = 7000;
  {
    auto a = rq::Client::connect(socket_);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    net::Fd mine = client_buffer(kSize);
    // A size that is not the descriptor's is refused, and nothing is taken.
    auto wrong = a->bind_dmabuf(mine.get(), 2 * kSize);
    ASSERT_FALSE(wrong.is_ok());
    EXPECT_NE(wrong.status().message().find("the descriptor holds 1048576 bytes, the request says 2097152"),
              std::string::npos)
        << wrong.status().message();
    auto bound = a->bind_dmabuf(mine.get(), kSize);
    ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
    EXPECT_EQ(bound->type, rq::kTypeBindDmabufReply);
    EXPECT_EQ(bound->queue, 1u);  // the client queue, not rxq's own (0)
    EXPECT_EQ(bound->binding_id, 0u);
    EXPECT_EQ(bound->dmabuf_size, kSize);
    EXPECT_EQ(bound->flags, rq::kFlagClientDmabuf | rq::kFlagStandin);
    EXPECT_NE(bound->message.find("stand-in mode: not bound"), std::string::npos) << bound->message;
    ASSERT_TRUE(read_until(
        serve, fmt::format("client pid {}: its dmabuf of 1048576 bytes taken, unbound, for queue 1", ::getpid()), &log))
        << log;
    // Once is enough.
    auto again = a->bind_dmabuf(mine.get(), kSize);
    ASSERT_FALSE(again.is_ok());
    EXPECT_NE(again.status().message().find("this client's dmabuf is bound already (queue 1)"), std::string::npos)
        << again.status().message();
    // Its flows go to its queue, into its buffer: no descriptor comes back.
    auto lease = a->bind_flow(flow);
    ASSERT_TRUE(lease.is_ok()) << lease.status().to_string();
    EXPECT_FALSE(lease->dmabuf.valid());
    EXPECT_EQ(lease->reply.queue, 1u);
    EXPECT_EQ(lease->reply.dmabuf_size, kSize);
    EXPECT_EQ(lease->reply.flags & rq::kFlagClientDmabuf, rq::kFlagClientDmabuf);

    // Another client: the one client queue is taken.
    auto b = rq::Client::connect(socket_);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    net::Fd its = client_buffer(kSize);
    auto taken = b->bind_dmabuf(its.get(), kSize);
    ASSERT_FALSE(taken.is_ok());
    EXPECT_EQ(taken.status().code(), StatusCode::kNoResource) << taken.status().to_string();
    EXPECT_NE(taken.status().message().find("all 1 queue(s) for clients' own dmabufs are taken"), std::string::npos)
        << taken.status().message();
    // With a flow into rxq's buffer first, it may not switch to its own afterwards.
    zerocopy::TcpFlow other = flow;
    other.dst_port = 7001;
    auto shared = b->bind_flow(other);
    ASSERT_TRUE(shared.is_ok()) << shared.status().to_string();
    EXPECT_TRUE(shared->dmabuf.valid());  // rxq's buffer
    EXPECT_EQ(shared->reply.queue, 0u);
  }  // both go: their flows are removed, and the client queue is free again
  ASSERT_TRUE(read_until(serve, fmt::format("client pid {}: its dmabuf on queue 1 released", ::getpid()), &log)) << log;
  {
    auto c = rq::Client::connect(socket_);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    net::Fd its = client_buffer(kSize);
    auto bound = c->bind_dmabuf(its.get(), kSize);
    ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
    EXPECT_EQ(bound->queue, 1u);
  }
  serve.signal(SIGTERM);
  ASSERT_TRUE(read_until(serve, "stopped; lo is as it was", &log)) << log;
  auto st = serve.wait(seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(Process::exited_ok(*st)) << Process::describe(*st) << "\n" << log;

  // An rxq started without client queues refuses a client's dmabuf, saying how to start it.
  Process plain({.argv = {REMORA_TOOL_PATH, "rxq", "serve", "--standin", "--ifname", "lo", "--socket", socket_,
                          "--journal", journal_, "--dmabuf-size", "65536"},
                 .env = {},
                 .capture_stderr = true});
  ASSERT_TRUE(plain.ok()) << plain.error();
  ASSERT_TRUE(read_until(plain, "rxq: serving lo queues 0 on " + socket_, &log)) << log;
  {
    auto d = rq::Client::connect(socket_);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    net::Fd its = client_buffer(kSize);
    auto refused = d->bind_dmabuf(its.get(), kSize);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.status().message().find("this rxq binds no clients' dmabufs (start it with --client-queues N)"),
              std::string::npos)
        << refused.status().message();
  }
  plain.signal(SIGTERM);
  ASSERT_TRUE(read_until(plain, "stopped; lo is as it was", &log)) << log;
  auto pst = plain.wait(seconds(30));
  ASSERT_TRUE(pst.has_value());
  EXPECT_TRUE(Process::exited_ok(*pst)) << Process::describe(*pst) << "\n" << log;
}

/// `r` is rxq's refusal of `what` with `err` (its name in the message) and `why`, as the
/// client maps it to `code`.
template <typename T>
void expect_refusal(const Result<T>& r, StatusCode code, const std::string& err, const std::string& why) {
  ASSERT_FALSE(r.is_ok()) << why;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(": " + err + " ("), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
}

TEST_F(Rxq, StandinReservesAClientQueueForItsOwnZcrxAndFreesItWithTheClient) {
  // io_uring zcrx: the application registers the queue with its own ring; rxq only
  // reserves one of its client queues for it and steers its flows there.
  Process serve({.argv = {REMORA_TOOL_PATH, "rxq", "serve", "--standin", "--ifname", "lo", "--queues", "1",
                          "--client-queues", "2", "--socket", socket_, "--journal", journal_, "--dmabuf-size", "65536"},
                 .env = {},
                 .capture_stderr = true});
  ASSERT_TRUE(serve.ok()) << serve.error();
  std::string log;
  ASSERT_TRUE(read_until(serve,
                         fmt::format("rxq: serving lo queues 0 on {} (journal {}); queues 1,2 for clients' own "
                                     "dmabufs or zcrx",
                                     socket_, journal_),
                         &log))
      << log;
  const uint32_t lo = ::if_nametoindex("lo");
  ASSERT_NE(lo, 0u);
  const pid_t pid = ::getpid();
  zerocopy::TcpFlow flow;
  flow.dst_port = 7000;

  auto ra = rq::Client::connect(socket_);
  ASSERT_TRUE(ra.is_ok()) << ra.status().to_string();
  std::optional<rq::Client> a(std::move(*ra));
  auto reserved = a->reserve_queue();
  ASSERT_TRUE(reserved.is_ok()) << reserved.status().to_string();
  EXPECT_EQ(reserved->type, rq::kTypeReserveQueueReply);
  EXPECT_EQ(reserved->error, 0);
  EXPECT_EQ(reserved->queue, 2u);  // a client queue (1 or 2; the last free one), not rxq's own (0)
  EXPECT_EQ(rq::ifindex_of(*reserved), lo);
  EXPECT_EQ(reserved->binding_id, lo);
  EXPECT_EQ(reserved->rule_location, rq::kNoRule);
  EXPECT_EQ(reserved->dmabuf_size, 0u);
  EXPECT_EQ(reserved->flags, rq::kFlagClientZcrx | rq::kFlagStandin);
  ASSERT_TRUE(read_until(
      serve, fmt::format("client pid {}: queue 2 reserved for its io_uring zcrx (lo index {})", pid, lo), &log))
      << log;
  // Once is enough, by either request.
  expect_refusal(a->reserve_queue(), StatusCode::kNoResource, "EEXIST",
                 "this client has a queue of its own already (queue 2, reserved for its io_uring zcrx)");
  net::Fd mine = client_buffer(1 << 20);
  expect_refusal(a->bind_dmabuf(mine.get(), 1 << 20), StatusCode::kNoResource, "EEXIST",
                 "this client has a queue of its own already (queue 2, reserved for its io_uring zcrx)");
  // Its flows go to its queue: no descriptor, the ifindex again.
  auto lease = a->bind_flow(flow);
  ASSERT_TRUE(lease.is_ok()) << lease.status().to_string();
  EXPECT_FALSE(lease->dmabuf.valid());
  EXPECT_EQ(lease->reply.type, rq::kTypeBindFlowReply);
  EXPECT_EQ(lease->reply.queue, 2u);
  EXPECT_EQ(rq::ifindex_of(lease->reply), lo);
  EXPECT_EQ(lease->reply.dmabuf_size, 0u);
  EXPECT_EQ(lease->reply.rule_location, rq::kNoRule);  // lo refuses the rule
  EXPECT_EQ(lease->reply.flags, rq::kFlagClientZcrx | rq::kFlagStandin | rq::kFlagRuleRefused);
  EXPECT_NE(slurp(journal_).find(fmt::format("flow {} 2 none flow-type tcp4 dst-port 7000\n", pid)), std::string::npos)
      << slurp(journal_);

  // A client with a flow into rxq's buffer already may not take a queue afterwards.
  auto d = rq::Client::connect(socket_);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  zerocopy::TcpFlow shared_flow = flow;
  shared_flow.dst_port = 7001;
  auto shared = d->bind_flow(shared_flow);
  ASSERT_TRUE(shared.is_ok()) << shared.status().to_string();
  EXPECT_TRUE(shared->dmabuf.valid());  // rxq's buffer
  EXPECT_EQ(shared->reply.queue, 0u);
  expect_refusal(d->reserve_queue(), StatusCode::kNoResource, "EBUSY",
                 "this client has flows into rxq's buffer already: reserve the queue before any flow");

  // A client's own dmabuf takes the other client queue; it cannot also reserve one.
  auto b = rq::Client::connect(socket_);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  net::Fd its = client_buffer(1 << 20);
  auto bound = b->bind_dmabuf(its.get(), 1 << 20);
  ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
  EXPECT_EQ(bound->queue, 1u);
  EXPECT_EQ(bound->flags, rq::kFlagClientDmabuf | rq::kFlagStandin);
  expect_refusal(b->reserve_queue(), StatusCode::kNoResource, "EEXIST",
                 "this client has a queue of its own already (queue 1, bound to its dmabuf)");

  // All client queues taken.
  auto c = rq::Client::connect(socket_);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  expect_refusal(c->reserve_queue(), StatusCode::kNoResource, "EBUSY", "all 2 client queue(s) are taken");
  ASSERT_TRUE(read_until(serve,
                         fmt::format("client pid {}: refused a queue for its io_uring zcrx: all 2 client queue(s) "
                                     "are taken",
                                     pid),
                         &log))
      << log;
  // Malformed: a descriptor with the request, a nonzero reserved byte. Refused as EINVAL
  // in a reserve-queue reply, with no descriptor.
  auto raw = [&](std::vector<std::byte> bytes, int fd) {
    EXPECT_TRUE(rq::send_packet(c->fd(), bytes, fd).is_ok());
    auto p = rq::recv_packet(c->fd(), rq::kMaxReplyBytes, net::Clock::now() + seconds(30));
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    if (!p.is_ok()) return rq::BindFlowReply{};
    EXPECT_FALSE(p->fd.valid());
    auto r = rq::decode_reply(p->bytes);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : rq::BindFlowReply{};
  };
  const rq::BindFlowReply with_fd = raw(rq::encode(rq::ReserveQueueRequest{}), its.get());
  EXPECT_EQ(with_fd.type, rq::kTypeReserveQueueReply);
  EXPECT_EQ(with_fd.error, EINVAL);
  EXPECT_EQ(with_fd.message, "a reserve-queue request must not carry a descriptor");
  auto bad = rq::encode(rq::ReserveQueueRequest{});
  bad[20] = std::byte{1};
  const rq::BindFlowReply nonzero = raw(bad, -1);
  EXPECT_EQ(nonzero.type, rq::kTypeReserveQueueReply);
  EXPECT_EQ(nonzero.error, EINVAL);
  EXPECT_EQ(nonzero.message, "rxq reserve-queue request: reserved bytes 8..47 are not zero");

  // The holder goes: its flow is removed and its queue is free for the next client.
  a.reset();
  ASSERT_TRUE(read_until(serve, fmt::format("removed client pid {}'s flow-type tcp4 dst-port 7000", pid), &log)) << log;
  ASSERT_TRUE(read_until(serve, fmt::format("client pid {}: its zcrx queue 2 released", pid), &log)) << log;
  auto now = c->reserve_queue();
  ASSERT_TRUE(now.is_ok()) << now.status().to_string();
  EXPECT_EQ(now->queue, 2u);
  EXPECT_EQ(rq::ifindex_of(*now), lo);
  EXPECT_EQ(now->flags, rq::kFlagClientZcrx | rq::kFlagStandin);

  serve.signal(SIGTERM);
  ASSERT_TRUE(read_until(serve, "stopped; lo is as it was", &log)) << log;
  auto st = serve.wait(seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(Process::exited_ok(*st)) << Process::describe(*st) << "\n" << log;

  // An rxq started without client queues refuses, saying how to start it.
  Process plain({.argv = {REMORA_TOOL_PATH, "rxq", "serve", "--standin", "--ifname", "lo", "--socket", socket_,
                          "--journal", journal_, "--dmabuf-size", "65536"},
                 .env = {},
                 .capture_stderr = true});
  ASSERT_TRUE(plain.ok()) << plain.error();
  ASSERT_TRUE(read_until(plain, "rxq: serving lo queues 0 on " + socket_, &log)) << log;
  {
    auto e = rq::Client::connect(socket_);
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    expect_refusal(e->reserve_queue(), StatusCode::kUnsupported, "EOPNOTSUPP",
                   "this rxq reserves no queues for clients (start it with --client-queues N)");
  }
  plain.signal(SIGTERM);
  ASSERT_TRUE(read_until(plain, "stopped; lo is as it was", &log)) << log;
  auto pst = plain.wait(seconds(30));
  ASSERT_TRUE(pst.has_value());
  EXPECT_TRUE(Process::exited_ok(*pst)) << Process::describe(*pst) << "\n" << log;
}

TEST_F(Rxq, UndoReplaysTheJournalOfAKilledRxq) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  const std::vector<std::string> serve_args = {"serve", "--standin", "--ifname", "rmr0", "--socket", socket_,
                                               "--journal", journal_, "--dmabuf-size", "65536"};
  Process serve({.argv = rxq(net, net.ns_a(), serve_args), .env = {}, .capture_stderr = true});
  ASSERT_TRUE(serve.ok()) << serve.error();
  std::string log;
  ASSERT_TRUE(read_until(serve, "rxq: serving rmr0", &log)) << log;
  auto c = rq::Client::connect(socket_);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  zerocopy::TcpFlow flow;
  flow.dst_port = 7000;
  ASSERT_TRUE(c->bind_flow(flow).is_ok());
  serve.kill_and_reap();

  const std::string left = slurp(journal_);
  EXPECT_NE(left.find(fmt::format("1 flow {} 0 none flow-type tcp4 dst-port 7000\n", ::getpid())), std::string::npos)
      << left;
  // A new rxq will not start over a journal it did not undo.
  const CommandResult again = run_command(rxq(net, net.ns_a(), serve_args), seconds(60));
  EXPECT_EQ(WEXITSTATUS(again.status), 1) << again.output;
  EXPECT_NE(again.output.find("run `remora rxq undo --journal " + journal_ + "` first"), std::string::npos)
      << again.output;
  EXPECT_EQ(slurp(journal_), left);

  const CommandResult undo = run_command(rxq(net, net.ns_a(), {"undo", "--journal", journal_}), seconds(60));
  EXPECT_TRUE(undo.ok()) << undo.output;
  EXPECT_NE(undo.output.find("rxq: undone: flow"), std::string::npos) << undo.output;
  EXPECT_NE(undo.output.find("1 of 1 entries undone; journal removed"), std::string::npos) << undo.output;
  EXPECT_FALSE(std::filesystem::exists(journal_));
  const CommandResult nothing = run_command(rxq(net, net.ns_a(), {"undo", "--journal", journal_}), seconds(60));
  EXPECT_EQ(WEXITSTATUS(nothing.status), 1) << nothing.output;
  EXPECT_NE(nothing.output.find("cannot read it"), std::string::npos) << nothing.output;
}

}  // namespace
}  // namespace remora::itest
