// `remora doctor --json` inside the kernel lab: the lab's kernel has a dmabuf exporter
// (udmabuf built in), so the doctor's dmabuf line says yes and names it, the kernel it
// reports is the one running, and loopback still offers no device path (exit 3), each
// bind and zcrx attempt refused with the kernel's errno; zcrx's device-less copy mode
// (Linux 7.1+) is there, and the doctor says so and what a NIC would add.
#include <sys/utsname.h>
#include <sys/wait.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lab_util.h"
#include "support/process.h"

namespace remora::lab {
namespace {

struct DoctorRun {
  int exit_code = -1;
  nlohmann::json doc;
};

DoctorRun run_doctor() {
  itest::Process p({.argv = {REMORA_TOOL_PATH, "doctor", "--json"}, .env = {}, .capture_stderr = false});
  EXPECT_TRUE(p.ok()) << p.error();
  DoctorRun r;
  const std::string out = p.read_all(std::chrono::seconds(120));
  auto st = p.wait(std::chrono::seconds(10));
  if (!st) {
    p.kill_and_reap();
    ADD_FAILURE() << "remora doctor did not finish";
    return r;
  }
  r.exit_code = WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
  r.doc = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(r.doc.is_discarded()) << out;
  return r;
}

TEST(DoctorLab, ReportsTheLabsDmabufExporterAndTheRunningKernel) {
  const DoctorRun r = run_doctor();
  ASSERT_TRUE(r.doc.is_object());
  const auto& dmabuf = r.doc["host"]["dmabuf_source"];
  REMORA_LAB_NEEDS(dmabuf["state"] == "yes", "a dmabuf exporter: doctor says " + dmabuf.dump());
  const std::string detail = dmabuf["detail"];
  EXPECT_TRUE(detail.starts_with("udmabuf") || detail.starts_with("dma-heap system")) << detail;
  utsname u{};
  ASSERT_EQ(::uname(&u), 0);
  EXPECT_EQ(r.doc["kernel"], std::string(u.release));
  // No interface here can bind: exit 3, and the number in the document too.
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.doc["exit_code"], 3);
  EXPECT_EQ(r.doc["device_path_available"], false);
  bool saw_lo = false;
  for (const auto& itf : r.doc["interfaces"]) {
    if (itf["name"] != "lo") continue;
    saw_lo = true;
    for (const char* key : {"devmem_rx", "devmem_tx"}) {
      SCOPED_TRACE(key);
      EXPECT_EQ(itf[key]["state"], "no");
      EXPECT_EQ(itf[key]["errno_name"], "EOPNOTSUPP") << itf[key].dump();
      // The refusal came with a real dmabuf, not the memfd stand-in.
      EXPECT_EQ(std::string(itf[key]["reason"]).find("memfd"), std::string::npos) << itf[key].dump();
    }
    std::cout << "[ kernel   ] lo devmem_rx: " << itf["devmem_rx"]["reason"].get<std::string>()
              << "\n[ kernel   ] lo devmem_tx: " << itf["devmem_tx"]["reason"].get<std::string>()
              << "\n[ kernel   ] lo zcrx: " << itf["zcrx"]["reason"].get<std::string>() << "\n";
  }
  EXPECT_TRUE(saw_lo);
}

TEST(DoctorLab, ReportsZcrxCopyModeAndWhatANicWouldAdd) {
  const DoctorRun r = run_doctor();
  ASSERT_TRUE(r.doc.is_object());
  const auto& copy = r.doc["host"]["zcrx_copy"];
  ASSERT_TRUE(copy.is_object()) << r.doc["host"].dump();
  REMORA_LAB_NEEDS(copy["state"] == "yes", "io_uring zcrx device-less mode: doctor says " + copy.dump());
  const std::string detail = copy["detail"], reason = copy["reason"];
  EXPECT_NE(detail.find("ZCRX_REG_NODEV"), std::string::npos) << detail;
  EXPECT_NE(detail.find("REMORA_ZCRX_MODE=copy"), std::string::npos) << detail;
  EXPECT_NE(reason.find("nothing is zero-copy"), std::string::npos) << reason;
  EXPECT_NE(reason.find("header split"), std::string::npos) << reason;
  std::cout << "[ kernel   ] zcrx copy mode: " << detail << "\n[ kernel   ] note: " << reason << "\n";
}

}  // namespace
}  // namespace remora::lab
