// zerocopy/dmabuf_source: the best descriptor for a bind attempt. Where an exporter exists
// the descriptor must really be a dmabuf (its fdinfo names an exporter); where none does,
// as here, a memfd of the asked size with the reasons, exporter by exporter.
#include "zerocopy/dmabuf_source.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy {
namespace {

std::string fdinfo(int fd) {
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(fd));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DmabufSource, ADmabufWhereAnExporterIsElseAMemfdWithReasons) {
  const size_t size = 16 * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto src = best_dmabuf(size);
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  ASSERT_TRUE(src->fd.valid());
  EXPECT_EQ(src->size, size);
  if (src->is_dmabuf()) {
    EXPECT_NE(fdinfo(src->fd.get()).find("exp_name:"), std::string::npos) << src->describe() << " is no dmabuf";
    EXPECT_TRUE(src->why_no_dmabuf.empty());
    return;
  }
  EXPECT_EQ(src->describe(), "memfd (not a dmabuf)");
  EXPECT_EQ(fdinfo(src->fd.get()).find("exp_name:"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::fstat(src->fd.get(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), size);
  EXPECT_NE(src->why_no_dmabuf.find("/dev/udmabuf"), std::string::npos) << src->why_no_dmabuf;
  EXPECT_NE(src->why_no_dmabuf.find("/dev/dma_heap/system"), std::string::npos) << src->why_no_dmabuf;
}

TEST(DmabufSource, SizesThatAreNotWholePagesAreRefused) {
  EXPECT_EQ(best_dmabuf(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(best_dmabuf(100).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace remora::zerocopy
