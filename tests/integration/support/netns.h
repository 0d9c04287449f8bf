// netns.h — two network namespaces joined by a veth pair, removed on destruction.
//
// Everything happens inside the two namespaces (the veth is created in A with its
// peer end moved straight into B), with addresses 10.199.<x>.1 (A) and .2 (B) /24, so
// nothing outside them is touched or addressed.
#pragma once

#include <string>
#include <vector>

namespace remora::itest {

class NetnsPair {
 public:
  /// Creates the pair; on failure `ok()` is false and `error()` has the command output.
  NetnsPair();
  ~NetnsPair();  ///< always deletes both namespaces (and so the veth pair)
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

  const std::string& ns_a() const { return ns_[0]; }
  const std::string& ns_b() const { return ns_[1]; }
  const std::string& addr_a() const { return addr_[0]; }  ///< "10.199.x.1"
  const std::string& addr_b() const { return addr_[1]; }

  /// {"ip", "netns", "exec", <ns>} — prefix for a command to run inside.
  std::vector<std::string> exec_prefix(const std::string& ns) const;

 private:
  bool run(const std::vector<std::string>& argv);

  std::string ns_[2];
  std::string addr_[2];
  bool created_[2] = {false, false};
  bool ok_ = false;
  std::string error_;
};

}  // namespace remora::itest
