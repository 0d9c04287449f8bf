// rxq_journal_test.cc — the restore journal of `remora rxq`, with its real file: entries
// written before they take effect and read back identical, struck off exactly, a second
// journal refused while one exists, strict parsing of a damaged file (naming the line),
// and undo against the real kernel on loopback: a flow without a rule needs nothing; the
// header-split, RSS and rule entries the kernel refuses on lo stay in the file, with the
// errno, so that another `rxq undo` can retry.
#include "zerocopy/rxq_journal.h"

#include <net/if.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy::rxq {
namespace {

class RxqJournal : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/remora-rxq-journal-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/j";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string file() const {
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_, path_;
};

JournalEntry flow_entry(int32_t pid, uint32_t queue, std::optional<uint32_t> loc) {
  JournalEntry e;
  e.kind = JournalEntry::Kind::kFlow;
  e.pid = pid;
  e.queue = queue;
  e.rule_location = loc;
  e.flow = "flow-type tcp4 dst-port 5000";
  return e;
}

TEST_F(RxqJournal, EntriesAreInTheFileAndStruckOffExactly) {
  auto j = Journal::create(path_, "eth1", 3);
  ASSERT_TRUE(j.is_ok()) << j.status().to_string();
  EXPECT_EQ(file(), "remora-rxq-journal 1 eth1 3\n");
  JournalEntry hs;
  hs.kind = JournalEntry::Kind::kHeaderSplit;
  hs.header_split = 1;
  JournalEntry rss;
  rss.kind = JournalEntry::Kind::kRss;
  rss.rss = {0, 1, 2, 3};
  JournalEntry hds;
  hds.kind = JournalEntry::Kind::kHdsThresh;
  hds.hds_thresh = 4096;
  ASSERT_EQ(*j->add(hs), 1u);
  ASSERT_EQ(*j->add(rss), 2u);
  ASSERT_EQ(*j->add(flow_entry(100, 15, 1023)), 3u);
  ASSERT_EQ(*j->add(flow_entry(101, 14, std::nullopt)), 4u);
  ASSERT_EQ(*j->add(hds), 5u);
  ASSERT_TRUE(j->remove(5).is_ok());
  ASSERT_EQ(*j->add(hds), 6u);
  const std::string want =
      "remora-rxq-journal 1 eth1 3\n"
      "1 header-split 1\n"
      "2 rss 4 0 1 2 3\n"
      "3 flow 100 15 1023 flow-type tcp4 dst-port 5000\n"
      "4 flow 101 14 none flow-type tcp4 dst-port 5000\n"
      "6 hds-thresh 4096\n";
  EXPECT_EQ(file(), want);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));

  auto again = Journal::load(path_);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->text(), want);
  EXPECT_EQ(again->ifname(), "eth1");
  EXPECT_EQ(again->ifindex(), 3u);
  EXPECT_EQ(again->entries().at(2).rule_location, 1023u);
  EXPECT_FALSE(again->entries().at(3).rule_location.has_value());
  EXPECT_EQ(again->entries().at(4).kind, JournalEntry::Kind::kHdsThresh);
  EXPECT_EQ(again->entries().at(4).hds_thresh, 4096u);

  ASSERT_TRUE(j->remove(3).is_ok());
  EXPECT_EQ(file(),
            "remora-rxq-journal 1 eth1 3\n1 header-split 1\n2 rss 4 0 1 2 3\n"
            "4 flow 101 14 none flow-type tcp4 dst-port 5000\n6 hds-thresh 4096\n");
  EXPECT_FALSE(j->remove(3).is_ok());
  // Ids keep rising after a removal, so a reloaded journal never reuses one.
  EXPECT_EQ(*j->add(flow_entry(102, 15, 7)), 7u);
}

TEST_F(RxqJournal, ASecondJournalIsRefusedWhileOneExists) {
  ASSERT_TRUE(Journal::create(path_, "eth1", 3).is_ok());
  auto second = Journal::create(path_, "eth1", 3);
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find("remora rxq undo --journal " + path_), std::string::npos)
      << second.status().message();
  EXPECT_FALSE(Journal::create(dir_ + "/no/such/dir/j", "eth1", 3).is_ok());
  EXPECT_FALSE(Journal::create(dir_ + "/k", "eth 1", 3).is_ok());
}

TEST_F(RxqJournal, DamagedFilesAreRefusedNamingTheLine) {
  const std::string head = "remora-rxq-journal 1 eth1 3\n";
  struct Case {
    std::string text, why;
  } cases[] = {
      {"", "line 1: empty"},
      {"remora-rxq-journal 1 eth1 3", "line 1: empty, or the last line"},
      {"remora-rxq-journal 2 eth1 3\n", "line 1: version '2'"},
      {"something else\n", "line 1: not a header"},
      {head + "1 header-split 3\n", "line 2: header-split wants"},
      {head + "1 hds-thresh\n", "line 2: hds-thresh wants"},
      {head + "1 hds-thresh -1\n", "line 2: hds-thresh wants"},
      {head + "1 hds-thresh 1 2\n", "line 2: hds-thresh wants"},
      {head + "1 hds-thresh 4294967296\n", "line 2: hds-thresh wants"},
      {head + "1 rss 3 0 1\n", "line 2: rss wants"},
      {head + "1 rss 1 x\n", "line 2: rss entry 0"},
      {head + "1 flow 0 1 none flow-type tcp4 dst-port 1\n", "line 2: flow wants"},
      {head + "1 flow 5 1 here flow-type tcp4 dst-port 1\n", "line 2: rule location 'here'"},
      {head + "2 header-split 1\n1 header-split 1\n", "line 3: entry id 1 is not above"},
      {head + "1 teleport 1\n", "line 2: unknown entry 'teleport'"},
      {head + "01 header-split 1\n", "line 2: no entry id"},
  };
  for (const Case& c : cases) {
    auto j = Journal::parse("J", c.text);
    ASSERT_FALSE(j.is_ok()) << c.text;
    EXPECT_EQ(j.status().code(), StatusCode::kProtocol);
    EXPECT_NE(j.status().message().find(c.why), std::string::npos) << j.status().message();
  }
  EXPECT_FALSE(Journal::load(dir_ + "/absent").is_ok());
}

TEST_F(RxqJournal, UndoOnLoopbackKeepsWhatTheKernelRefuses) {
  const uint32_t lo = ::if_nametoindex("lo");
  ASSERT_NE(lo, 0u);
  auto j = Journal::create(path_, "lo", lo);
  ASSERT_TRUE(j.is_ok());
  JournalEntry hs;
  hs.kind = JournalEntry::Kind::kHeaderSplit;
  hs.header_split = 1;
  JournalEntry rss;
  rss.kind = JournalEntry::Kind::kRss;
  rss.rss = {0, 0};
  JournalEntry hds;
  hds.kind = JournalEntry::Kind::kHdsThresh;
  hds.hds_thresh = 256;
  ASSERT_TRUE(j->add(hs).is_ok());
  ASSERT_TRUE(j->add(hds).is_ok());
  ASSERT_TRUE(j->add(rss).is_ok());
  ASSERT_TRUE(j->add(flow_entry(100, 0, 5)).is_ok());
  ASSERT_TRUE(j->add(flow_entry(101, 0, std::nullopt)).is_ok());
  const UndoOutcome out = undo_all(&*j);
  // The rule-less flow is done; lo refuses the rest (no rules, no RSS, no rings-set),
  // undone last first.
  ASSERT_EQ(out.done.size(), 1u);
  EXPECT_EQ(out.done[0], "flow 101 0 none flow-type tcp4 dst-port 5000");
  ASSERT_EQ(out.failed.size(), 4u);
  EXPECT_EQ(out.failed[0].rfind("flow 100 0 5 ", 0), 0u) << out.failed[0];
  EXPECT_NE(out.failed[0].find("ETHTOOL_SRXCLSRLDEL"), std::string::npos) << out.failed[0];
  EXPECT_NE(out.failed[1].find("ETHTOOL_SRXFHINDIR"), std::string::npos) << out.failed[1];
  EXPECT_NE(out.failed[1].find("EOPNOTSUPP"), std::string::npos) << out.failed[1];
  EXPECT_EQ(out.failed[2].rfind("hds-thresh 256: ", 0), 0u) << out.failed[2];
  EXPECT_NE(out.failed[2].find("rings-set hds-thresh=256"), std::string::npos) << out.failed[2];
  EXPECT_NE(out.failed[3].find("rings-set tcp-data-split=1"), std::string::npos) << out.failed[3];
  EXPECT_EQ(file(), fmt::format("remora-rxq-journal 1 lo {}\n1 header-split 1\n2 hds-thresh 256\n3 rss 2 0 0\n"
                                "4 flow 100 0 5 flow-type tcp4 dst-port 5000\n",
                                lo));
  // With nothing the kernel must do, undo empties the journal and removes the file.
  ASSERT_TRUE(std::filesystem::remove(path_));
  auto k = Journal::create(path_, "lo", lo);
  ASSERT_TRUE(k.is_ok());
  ASSERT_TRUE(k->add(flow_entry(7, 0, std::nullopt)).is_ok());
  EXPECT_TRUE(undo_all(&*k).ok());
  EXPECT_FALSE(std::filesystem::exists(path_));
}

}  // namespace
}  // namespace remora::zerocopy::rxq
