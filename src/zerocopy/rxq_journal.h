// zerocopy/rxq_journal.h — the restore journal of `remora rxq serve`: every change it
// makes to an interface (header split set, its threshold set, RSS indirection table
// changed, a flow's ntuple rule installed) is written to a file *before* it is made,
// with what undoes it, and struck off once undone. When rxq ends normally it undoes
// everything in reverse order and removes the file; when it is killed (SIGKILL, a
// crash, power loss of the process) the file stays, and `remora rxq undo --journal
// PATH` replays it. The file is rewritten whole (temporary file, fsync, rename) on
// every change, so it is never half written.
//
// The format (one entry per line, fields separated by one space; docs/device-memory-internals.md):
//   remora-rxq-journal 1 <ifname> <ifindex>
//   <id> header-split <value to restore: 0 unknown, 1 off, 2 on>
//   <id> hds-thresh <value to restore>
//   <id> rss <n> <queue of bucket 0> ... <queue of bucket n-1>
//   <id> flow <pid> <queue> <rule location | none> <the flow, as ethtool -N spells it>
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "remora/status.h"
#include "zerocopy/kernel_error.h"

namespace remora::zerocopy::rxq {

struct JournalEntry {
  enum class Kind : uint8_t {
    kHeaderSplit,  ///< rxq set tcp-data-split; undo: rings-set `header_split`
    kHdsThresh,    ///< rxq set hds-thresh; undo: rings-set `hds_thresh`
    kRss,          ///< rxq changed the RSS indirection table; undo: set `rss`
    kFlow,         ///< a client's flow (with its ntuple rule, if one was installed); undo: delete the rule
  };
  Kind kind = Kind::kFlow;
  uint64_t id = 0;
  uint8_t header_split = 0;
  uint32_t hds_thresh = 0;
  std::vector<uint32_t> rss;
  int32_t pid = 0;
  uint32_t queue = 0;
  std::optional<uint32_t> rule_location;  ///< nullopt: no rule (the kernel refused it; stand-in mode)
  std::string flow;

  /// The entry's line, without the id and newline ("flow 123 15 4 flow-type tcp4 dst-port 5000").
  std::string describe() const;
};

/// The journal of one interface, in memory and in its file.
class Journal {
 public:
  /// A new journal at `path`. Refuses (kInvalidArgument, saying to run `remora rxq undo`)
  /// when a file is already there: an earlier rxq did not finish undoing.
  static Result<Journal> create(std::string path, std::string ifname, uint32_t ifindex);
  /// The journal a killed rxq left: parsed strictly (kProtocol naming the line).
  static Result<Journal> load(std::string path);
  /// The same, from text (what load reads).
  static Result<Journal> parse(std::string path, std::string_view text);

  /// Records `entry` (its id assigned here) and writes the file; returns the id.
  Result<uint64_t> add(JournalEntry entry);
  /// Strikes entry `id` off and writes the file.
  Status remove(uint64_t id);
  /// Removes the file (once everything is undone).
  Status erase_file();

  const std::string& path() const { return path_; }
  const std::string& ifname() const { return ifname_; }
  uint32_t ifindex() const { return ifindex_; }
  const std::vector<JournalEntry>& entries() const { return entries_; }
  /// The file's text for the entries held now.
  std::string text() const;

 private:
  Journal(std::string path, std::string ifname, uint32_t ifindex)
      : path_(std::move(path)), ifname_(std::move(ifname)), ifindex_(ifindex) {}
  Status write();
  std::string path_;
  std::string ifname_;
  uint32_t ifindex_ = 0;
  uint64_t next_id_ = 1;
  std::vector<JournalEntry> entries_;
};

/// Undoes one entry on the journal's interface, through the kernel (ethtool netlink for
/// header split, SIOCETHTOOL for RSS and rules). A flow without a rule needs nothing.
/// A refusal fills `*refusal`.
Status undo_entry(const Journal& journal, const JournalEntry& entry, KernelError* refusal = nullptr);

/// The outcome of undoing a journal.
struct UndoOutcome {
  std::vector<std::string> done;    ///< what was undone, in order
  std::vector<std::string> failed;  ///< what could not be, each with the kernel's reason
  bool ok() const { return failed.empty(); }
};

/// Undoes every entry, last first. Each undone entry is struck off the file; those the
/// kernel refuses stay in it (so that another `rxq undo` can retry), and when none is
/// left the file is removed.
UndoOutcome undo_all(Journal* journal);

}  // namespace remora::zerocopy::rxq
