// zerocopy/rxq_journal.cc — see rxq_journal.h.
#include "zerocopy/rxq_journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "net/socket.h"
#include "zerocopy/ethtool_nl.h"
#include "zerocopy/flow_steering.h"

namespace remora::zerocopy::rxq {
namespace {

constexpr std::string_view kHead = "remora-rxq-journal";
constexpr uint32_t kVersion = 1;

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at <= line.size()) {
    const size_t sp = line.find(' ', at);
    const size_t end = sp == std::string_view::npos ? line.size() : sp;
    out.push_back(line.substr(at, end - at));
    if (sp == std::string_view::npos) break;
    at = sp + 1;
  }
  return out;
}

template <typename T>
bool number(std::string_view s, T* out) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;  // one spelling per number
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string JournalEntry::describe() const {
  switch (kind) {
    case Kind::kHeaderSplit: return fmt::format("header-split {}", header_split);
    case Kind::kHdsThresh: return fmt::format("hds-thresh {}", hds_thresh);
    case Kind::kRss: return rss.empty() ? "rss 0" : fmt::format("rss {} {}", rss.size(), fmt::join(rss, " "));
    case Kind::kFlow:
      return fmt::format("flow {} {} {} {}", pid, queue,
                         rule_location ? std::to_string(*rule_location) : std::string("none"), flow);
  }
  return "";
}

std::string Journal::text() const {
  std::string t = fmt::format("{} {} {} {}\n", kHead, kVersion, ifname_, ifindex_);
  for (const JournalEntry& e : entries_) t += fmt::format("{} {}\n", e.id, e.describe());
  return t;
}

Result<Journal> Journal::create(std::string path, std::string ifname, uint32_t ifindex) {
  if (ifname.empty() || ifname.find_first_of(" \n") != std::string::npos) {
    return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not an interface name", ifname));
  }
  net::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    const int err = errno;
    if (err == EEXIST) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("rxq journal {} exists: an earlier `remora rxq serve` did not finish undoing its "
                                "changes; run `remora rxq undo --journal {}` first",
                                path, path));
    }
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("rxq journal {}: cannot create it: {}", path, errno_text(err)));
  }
  Journal j(std::move(path), std::move(ifname), ifindex);
  REMORA_RETURN_IF_ERROR(j.write());
  return j;
}

Result<Journal> Journal::load(std::string path) {
  std::ifstream in(path);
  if (!in) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("rxq journal {}: cannot read it: {}", path, errno_text(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(std::move(path), ss.str());
}

Result<Journal> Journal::parse(std::string path, std::string_view text) {
  auto bad = [&](size_t line, std::string why) {
    return Status(StatusCode::kProtocol, fmt::format("rxq journal {} line {}: {}", path, line, why));
  };
  if (text.empty() || text.back() != '\n') return bad(1, "empty, or the last line does not end with a newline");
  text.remove_suffix(1);
  size_t line_no = 0;
  std::optional<Journal> j;
  for (std::string_view rest = text;;) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    ++line_no;
    const auto f = split(line);
    if (!j) {
      uint32_t version = 0, ifindex = 0;
      if (f.size() != 4 || f[0] != kHead) return bad(line_no, fmt::format("not a header '{} 1 <ifname> <ifindex>'", kHead));
      if (!number(f[1], &version) || version != kVersion) return bad(line_no, fmt::format("version '{}', want 1", f[1]));
      if (f[2].empty() || !number(f[3], &ifindex) || ifindex == 0) return bad(line_no, "bad interface name or index");
      j = Journal(path, std::string(f[2]), ifindex);
    } else {
      JournalEntry e;
      if (f.size() < 2 || !number(f[0], &e.id) || e.id == 0) return bad(line_no, "no entry id");
      if (e.id < j->next_id_) return bad(line_no, fmt::format("entry id {} is not above the one before", e.id));
      if (f[1] == "header-split") {
        e.kind = JournalEntry::Kind::kHeaderSplit;
        if (f.size() != 3 || !number(f[2], &e.header_split) || e.header_split > 2) {
          return bad(line_no, "header-split wants one value 0, 1 or 2");
        }
      } else if (f[1] == "hds-thresh") {
        e.kind = JournalEntry::Kind::kHdsThresh;
        if (f.size() != 3 || !number(f[2], &e.hds_thresh)) return bad(line_no, "hds-thresh wants one number");
      } else if (f[1] == "rss") {
        e.kind = JournalEntry::Kind::kRss;
        size_t n = 0;
        if (f.size() < 3 || !number(f[2], &n) || n == 0 || f.size() != 3 + n) {
          return bad(line_no, "rss wants a count and that many queue numbers");
        }
        e.rss.resize(n);
        for (size_t i = 0; i < n; ++i) {
          if (!number(f[3 + i], &e.rss[i])) return bad(line_no, fmt::format("rss entry {} is not a number", i));
        }
      } else if (f[1] == "flow") {
        e.kind = JournalEntry::Kind::kFlow;
        uint32_t loc = 0;
        if (f.size() < 6 || !number(f[2], &e.pid) || e.pid <= 0 || !number(f[3], &e.queue)) {
          return bad(line_no, "flow wants <pid> <queue> <location|none> <flow>");
        }
        if (f[4] != "none") {
          if (!number(f[4], &loc)) return bad(line_no, fmt::format("rule location '{}' is neither a number nor none", f[4]));
          e.rule_location = loc;
        }
        const size_t at = static_cast<size_t>(f[5].data() - line.data());
        e.flow = std::string(line.substr(at));
      } else {
        return bad(line_no, fmt::format("unknown entry '{}'", f[1]));
      }
      j->next_id_ = e.id + 1;
      j->entries_.push_back(std::move(e));
    }
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  return std::move(*j);
}

Status Journal::write() {
  const std::string tmp = path_ + ".tmp";
  net::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) return net::errno_status(errno, fmt::format("rxq journal: open {}", tmp));
  const std::string t = text();
  size_t done = 0;
  while (done < t.size()) {
    const ssize_t n = ::write(fd.get(), t.data() + done, t.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return net::errno_status(errno, fmt::format("rxq journal: write {}", tmp));
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return net::errno_status(errno, fmt::format("rxq journal: fsync {}", tmp));
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    return net::errno_status(errno, fmt::format("rxq journal: rename {} to {}", tmp, path_));
  }
  return Status::ok();
}

Result<uint64_t> Journal::add(JournalEntry entry) {
  if (entry.flow.find('\n') != std::string::npos) return Status(StatusCode::kInvalidArgument, "a flow with a newline");
  entry.id = next_id_++;
  const uint64_t id = entry.id;
  entries_.push_back(std::move(entry));
  if (Status s = write(); !s) {
    entries_.pop_back();
    return s;
  }
  return id;
}

Status Journal::remove(uint64_t id) {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const JournalEntry& e) { return e.id == id; });
  if (it == entries_.end()) return Status(StatusCode::kInvalidArgument, fmt::format("rxq journal: no entry {}", id));
  JournalEntry kept = std::move(*it);
  const auto at = entries_.erase(it);
  if (Status s = write(); !s) {
    entries_.insert(at, std::move(kept));
    return s;
  }
  return Status::ok();
}

Status Journal::erase_file() {
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    return net::errno_status(errno, fmt::format("rxq journal: unlink {}", path_));
  }
  return Status::ok();
}

Status undo_entry(const Journal& journal, const JournalEntry& entry, KernelError* refusal) {
  switch (entry.kind) {
    case JournalEntry::Kind::kHeaderSplit: {
      REMORA_ASSIGN_OR_RETURN(EthtoolClient ethtool, EthtoolClient::open());
      return ethtool.set_tcp_data_split(journal.ifindex(), entry.header_split, refusal);
    }
    case JournalEntry::Kind::kHdsThresh: {
      REMORA_ASSIGN_OR_RETURN(EthtoolClient ethtool, EthtoolClient::open());
      return ethtool.set_hds_thresh(journal.ifindex(), entry.hds_thresh, refusal);
    }
    case JournalEntry::Kind::kRss: {
      REMORA_ASSIGN_OR_RETURN(FlowSteering steering, FlowSteering::open(journal.ifname()));
      return steering.set_indirection(entry.rss, refusal);
    }
    case JournalEntry::Kind::kFlow: {
      if (!entry.rule_location) return Status::ok();
      REMORA_ASSIGN_OR_RETURN(FlowSteering steering, FlowSteering::open(journal.ifname()));
      return steering.delete_rule(*entry.rule_location, refusal);
    }
  }
  return Status::ok();
}

UndoOutcome undo_all(Journal* journal) {
  UndoOutcome out;
  const std::vector<JournalEntry> entries = journal->entries();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const std::string what = it->describe();
    if (Status s = undo_entry(*journal, *it); !s) {
      out.failed.push_back(fmt::format("{}: {}", what, s.message()));
      continue;
    }
    if (Status s = journal->remove(it->id); !s) {
      out.failed.push_back(fmt::format("{}: undone, but the journal could not be updated: {}", what, s.message()));
      continue;
    }
    out.done.push_back(what);
  }
  if (journal->entries().empty()) {
    if (Status s = journal->erase_file(); !s) out.failed.push_back(s.message());
  }
  return out;
}

}  // namespace remora::zerocopy::rxq
