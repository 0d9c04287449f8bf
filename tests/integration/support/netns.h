// netns.h — network namespaces made for one test, removed on destruction:
//   NetnsPair    two namespaces joined by a veth pair
//   NetnsBridge  N namespaces, each with a veth into an (N+1)th that holds a bridge
//
// Everything happens inside the namespaces (each veth is created in its namespace with
// its peer end moved straight into the other), with private addresses (10.199.<x>.0/24
// for pairs, 10.198.<x>.0/24 for bridges, x from the pid), so nothing outside them is
// touched or addressed. Deleting a namespace deletes its links, and so the whole setup.
#pragma once

#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

/// At the top of a test that needs the setup `net`: when it could not be built, the test
/// skips with the reason if this process is not root (namespaces need CAP_NET_ADMIN), and
/// FAILS as root — as the test command runs — so that a broken setup never passes as a skip.
#define REMORA_NETNS_OR_SKIP(net)                                                       \
  do {                                                                                  \
    if (!(net).ok()) {                                                                  \
      if (::geteuid() == 0) FAIL() << "network namespaces, as root: " << (net).error(); \
      GTEST_SKIP() << "cannot create network namespaces (not root): " << (net).error(); \
    }                                                                                   \
  } while (0)

namespace remora::itest {

/// Runs `fn` on a thread inside network namespace `ns` (setns): the sockets it creates
/// (a connect's, a listener's) belong there, and keep belonging there when other threads
/// use them. False (and `error`) if the thread could not enter it.
bool in_netns(const std::string& ns, const std::function<void()>& fn, std::string* error);

/// What the setups share: the namespaces they created, and the commands that build them.
class NetnsGroup {
 public:
  ~NetnsGroup();  ///< always deletes every namespace it created (and so their links)
  NetnsGroup(const NetnsGroup&) = delete;
  NetnsGroup& operator=(const NetnsGroup&) = delete;

  /// Whether the setup was built; if not, `error()` has the failing command and its output.
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

  /// {"ip", "netns", "exec", <ns>} — prefix for a command to run inside.
  std::vector<std::string> exec_prefix(const std::string& ns) const;

 protected:
  NetnsGroup() = default;
  /// Creates namespace `ns` (after removing a leftover of that name from a crashed
  /// process with the same pid) and remembers to delete it.
  bool add_namespace(const std::string& ns);
  /// Runs a short `ip` command; on failure records it in error() and returns false.
  bool run(const std::vector<std::string>& argv);
  /// The third octet of this process's private subnets.
  static std::string subnet_octet();

  bool ok_ = false;

 private:
  std::vector<std::string> created_;
  std::string error_;
};

class NetnsPair : public NetnsGroup {
 public:
  /// Creates the pair; on failure `ok()` is false and `error()` says why.
  NetnsPair();

  const std::string& ns_a() const { return ns_[0]; }
  const std::string& ns_b() const { return ns_[1]; }
  const std::string& addr_a() const { return addr_[0]; }  ///< "10.199.x.1"
  const std::string& addr_b() const { return addr_[1]; }

 private:
  std::string ns_[2];
  std::string addr_[2];
};

/// Two namespaces joined by `n` veth pairs, one subnet per pair (a host with n NICs
/// facing a host with n NICs): pair i is "rla<i>" with 10.(196-i).x.1/24 in ns_a() and
/// "rlb<i>" with 10.(196-i).x.2/24 in ns_b().
class NetnsRails : public NetnsGroup {
 public:
  explicit NetnsRails(int n);

  const std::string& ns_a() const { return ns_[0]; }
  const std::string& ns_b() const { return ns_[1]; }
  const std::string& addr_a(int i) const { return addr_a_.at(static_cast<size_t>(i)); }
  const std::string& addr_b(int i) const { return addr_b_.at(static_cast<size_t>(i)); }
  /// Limits what leaves ns_b() on pair i to `rate` (tc tbf, e.g. "100mbit").
  bool shape_b(int i, const std::string& rate);
  /// The same for what leaves ns_a() on pair i.
  bool shape_a(int i, const std::string& rate);
  /// Adds to ns_b() an interface "rlb9" that is up with 10.193.x.2/24 (a veth whose
  /// peer stays in ns_b()), which nothing in ns_a() can answer (no route back).
  bool add_unreachable_b();

 private:
  std::string ns_[2];
  std::vector<std::string> addr_a_, addr_b_;
};

/// `n` namespaces on one Ethernet segment: namespace i has "rmr0" with address
/// 10.198.x.(i+1)/24, whose veth peer is a port of the bridge "rmrbr" in a separate
/// switch namespace (so no namespace of the test holds the bridge and its traffic is
/// switched, not routed). With `nics` 2, a second segment as well (rails): "rmr1" with
/// 10.197.x.(i+1)/24 on the bridge "rmrbr1" (ports "rmrq<i>").
class NetnsBridge : public NetnsGroup {
 public:
  explicit NetnsBridge(int n, int nics = 1);

  int size() const { return static_cast<int>(ns_.size()); }
  const std::string& ns(int i) const { return ns_.at(static_cast<size_t>(i)); }
  const std::string& addr(int i) const { return addr_.at(static_cast<size_t>(i)); }
  /// Namespace i's address on the second segment (nics 2).
  const std::string& addr2(int i) const { return addr2_.at(static_cast<size_t>(i)); }
  const std::string& switch_ns() const { return switch_; }

 private:
  std::vector<std::string> ns_;
  std::vector<std::string> addr_, addr2_;
  std::string switch_;
};

}  // namespace remora::itest
