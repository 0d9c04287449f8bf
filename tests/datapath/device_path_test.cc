// Tests of datapath/device_path.cc, the choice of a device transfer's data path: each
// REMORA_DEVICE_PATH mode with the kernel's answers given (DevicePathSelector::set_probe)
// and asked for real (this machine: no interface named, and lo, which refuses bind-tx),
// the memory's refusal to export a dmabuf asked once per domain, and REMORA_DEVICE_PATH /
// REMORA_DEVMEM_IFNAME read from the environment and refused when malformed.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "datapath/device_path.h"
#include "remora/testing/test_device.h"
#include "scoped_env.h"

namespace remora::detail {
namespace {

using remora::testing::TestDeviceDomain;

struct Dev {
  std::unique_ptr<TestDeviceDomain> dev = TestDeviceDomain::create({.capacity = size_t{1} << 20}).value();
  std::byte* mem = dev->allocate(4096).value();
};

DevicePathProbe refused_probe() {
  return {.devmem_tx_interface = Status(StatusCode::kUnsupported, "eth9: bind-tx: EOPNOTSUPP"),
          .devmem_rx = Status(StatusCode::kUnsupported, "eth9: no rxq binding"),
          .zcrx = Status(StatusCode::kUnsupported, "eth9: no zcrx queue")};
}

TEST(DevicePath, AutoStagesAndNamesEveryReason) {
  Dev d;
  Config c;
  std::snprintf(c.devmem_ifname.data(), c.devmem_ifname.size(), "%s", "lo");
  DevicePathSelector s(c);
  s.set_probe(refused_probe());
  // A message send (which devmem TX could take): the memory cannot be exported, and
  // what the interface said to the probe.
  auto tx = s.choose(*d.dev, d.mem, 4096, true, /*drives_devmem_tx=*/true);
  ASSERT_TRUE(tx.is_ok());
  EXPECT_EQ(tx->path, DataPath::kStaging);
  EXPECT_EQ(tx->devmem_tx, nullptr);
  EXPECT_NE(tx->reason.find("memory: the test-device memory domain cannot export a dmabuf"), std::string::npos)
      << tx->reason;
  EXPECT_NE(tx->reason.find("eth9: bind-tx: EOPNOTSUPP"), std::string::npos) << tx->reason;
  // An inline put or get reply: devmem TX does not take them (their bytes go in a frame).
  auto put = s.choose(*d.dev, d.mem, 4096, true);
  ASSERT_TRUE(put.is_ok());
  EXPECT_EQ(put->path, DataPath::kStaging);
  EXPECT_NE(put->reason.find("sends messages, chunked puts and the replies to peers' chunked gets by devmem TX"),
            std::string::npos)
      << put->reason;
  // Checksums need the bytes on the host; an empty message has none for the NIC.
  Config sum = c;
  sum.checksum = ChecksumMode::kCrc32c;
  DevicePathSelector with_crc(sum);
  with_crc.set_probe(refused_probe());
  auto crc = with_crc.choose(*d.dev, d.mem, 4096, true, true);
  ASSERT_TRUE(crc.is_ok());
  EXPECT_NE(crc->reason.find("REMORA_CHECKSUM=crc32c"), std::string::npos) << crc->reason;
  auto empty = s.choose(*d.dev, d.mem, 0, true, true);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_NE(empty->reason.find("an empty message"), std::string::npos) << empty->reason;
  auto rx = s.choose(*d.dev, d.mem, 4096, false);
  ASSERT_TRUE(rx.is_ok());
  EXPECT_EQ(rx->path, DataPath::kStaging);
  EXPECT_NE(rx->reason.find("devmem: eth9: no rxq binding"), std::string::npos) << rx->reason;
  EXPECT_NE(rx->reason.find("zcrx: eth9: no zcrx queue"), std::string::npos) << rx->reason;
  EXPECT_EQ(data_path_name(rx->path), "staging");
}

TEST(DevicePath, SteeredStreamsTakeChunkedReceivesButNotInlineOrCheckedOnes) {
  Dev d;
  Config c;
  DevicePathSelector s(c);
  s.set_probe(refused_probe());
  s.set_devmem_rx(Status(StatusCode::kOk, "rxq's dmabuf of 4096 bytes, binding 3"));
  auto recv = s.choose(*d.dev, d.mem, 4096, false, false, /*drives_devmem_rx=*/true);
  ASSERT_TRUE(recv.is_ok());
  EXPECT_EQ(recv->path, DataPath::kDevmem);
  EXPECT_NE(recv->reason.find("devmem RX into test-device memory: rxq's dmabuf of 4096 bytes, binding 3"),
            std::string::npos)
      << recv->reason;
  // An inline get's reply or inline put: its bytes come in a frame on the control stream.
  auto inline_bytes = s.choose(*d.dev, d.mem, 4096, false);
  ASSERT_TRUE(inline_bytes.is_ok());
  EXPECT_EQ(inline_bytes->path, DataPath::kStaging);
  EXPECT_NE(inline_bytes->reason.find("this transfer's bytes come inline on the control stream"), std::string::npos)
      << inline_bytes->reason;
  // With checksums the bytes must reach host memory, where the CRC is checked.
  Config sum = c;
  sum.checksum = ChecksumMode::kCrc32c;
  DevicePathSelector with_crc(sum);
  with_crc.set_probe(refused_probe());
  with_crc.set_devmem_rx(Status(StatusCode::kOk, "steered"));
  auto crc = with_crc.choose(*d.dev, d.mem, 4096, false, false, true);
  ASSERT_TRUE(crc.is_ok());
  EXPECT_EQ(crc->path, DataPath::kStaging);
  EXPECT_NE(crc->reason.find("REMORA_CHECKSUM=crc32c"), std::string::npos) << crc->reason;
  // Not steered: the endpoint's reason, not the probe's; demanded, a refusal.
  Config demand = c;
  demand.device_path = DevicePathMode::kDevmem;
  DevicePathSelector no(demand);
  no.set_probe(refused_probe());
  no.set_devmem_rx(Status(StatusCode::kUnsupported, "1 of 2 data streams steered; rxq refused"));
  auto refused = no.choose(*d.dev, d.mem, 4096, false, false, true);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("1 of 2 data streams steered; rxq refused"), std::string::npos)
      << refused.status().to_string();
}

TEST(DevicePath, ADemandedPathFailsWithItsReasonAndStagingNeverAsks) {
  Dev d;
  Config c;
  c.device_path = DevicePathMode::kDevmem;
  DevicePathSelector devmem(c);
  devmem.set_probe(refused_probe());
  auto r = devmem.choose(*d.dev, d.mem, 4096, false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("REMORA_DEVICE_PATH=devmem"), std::string::npos);
  EXPECT_NE(r.status().message().find("no rxq binding"), std::string::npos);

  c.device_path = DevicePathMode::kZcrx;
  DevicePathSelector zcrx(c);
  zcrx.set_probe(refused_probe());
  // zcrx demands how device memory is received; a send goes as under auto.
  auto z = zcrx.choose(*d.dev, d.mem, 4096, true);
  ASSERT_TRUE(z.is_ok()) << z.status().to_string();
  EXPECT_EQ(z->path, DataPath::kStaging);
  EXPECT_NE(z->reason.find("REMORA_DEVICE_PATH=zcrx: zcrx is a receive path (io_uring has no devmem send), so this "
                           "send goes as under auto: devmem: "),
            std::string::npos)
      << z->reason;
  auto zr = zcrx.choose(*d.dev, d.mem, 4096, false);
  ASSERT_FALSE(zr.is_ok());
  EXPECT_NE(zr.status().message().find("REMORA_DEVICE_PATH=zcrx: io_uring zero-copy receive cannot take"),
            std::string::npos)
      << zr.status().to_string();

  c.device_path = DevicePathMode::kStaging;
  std::snprintf(c.devmem_ifname.data(), c.devmem_ifname.size(), "%s", "none0");
  DevicePathSelector staging(c);  // no probe given: it must not need one
  auto st = staging.choose(*d.dev, d.mem, 4096, true);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st->reason, "REMORA_DEVICE_PATH=staging");
}

TEST(DevicePath, TheRealKernelIsAskedForTheNamedInterface) {
  Config none;
  const DevicePathProbe p = probe_device_paths(none);
  EXPECT_NE(p.devmem_tx_interface.message().find("REMORA_DEVMEM_IFNAME is unset"), std::string::npos);
  Config missing;
  std::snprintf(missing.devmem_ifname.data(), missing.devmem_ifname.size(), "%s", "no-such-if0");
  EXPECT_NE(probe_device_paths(missing).devmem_rx.message().find("no such interface"), std::string::npos);
  Config lo;
  std::snprintf(lo.devmem_ifname.data(), lo.devmem_ifname.size(), "%s", "lo");
  const DevicePathProbe l = probe_device_paths(lo);
  EXPECT_EQ(l.devmem_tx_interface.code(), StatusCode::kUnsupported) << l.devmem_tx_interface.to_string();
  EXPECT_NE(l.devmem_tx_interface.message().find("lo: bind-tx"), std::string::npos) << l.devmem_tx_interface.to_string();
  EXPECT_NE(l.devmem_tx_interface.message().find("EOPNOTSUPP"), std::string::npos) << l.devmem_tx_interface.to_string();
  EXPECT_NE(l.devmem_rx.message().find("remora rxq serve"), std::string::npos);
  EXPECT_NE(l.devmem_rx.message().find("REMORA_RXQ_SOCKET"), std::string::npos);
  EXPECT_NE(l.zcrx.message().find("not read by io_uring zero-copy receive: that takes REMORA_DEVICE_PATH=zcrx"),
            std::string::npos)
      << l.zcrx.message();
}

TEST(DevicePath, TheEnvironmentSetsTheModeAndTheInterface) {
  {
    remora::testing::ScopedEnv a("REMORA_DEVICE_PATH", "zcrx");
    remora::testing::ScopedEnv b("REMORA_DEVMEM_IFNAME", "eth7");
    auto c = Config::from_env();
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->device_path, DevicePathMode::kZcrx);
    EXPECT_STREQ(c->devmem_ifname.data(), "eth7");
  }
  {
    remora::testing::ScopedEnv bad("REMORA_DEVICE_PATH", "gpu");
    auto c = Config::from_env();
    ASSERT_FALSE(c.is_ok());
    EXPECT_NE(c.status().message().find("auto|devmem|zcrx|staging"), std::string::npos);
  }
  remora::testing::ScopedEnv long_name("REMORA_DEVMEM_IFNAME", "a-name-of-16-chr");
  auto c = Config::from_env();
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("15 characters"), std::string::npos) << c.status().to_string();
}

}  // namespace
}  // namespace remora::detail
