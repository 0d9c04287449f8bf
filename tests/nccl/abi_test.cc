// tests/nccl/abi_test.cc — plugin/nccl/net_abi.h against NCCL's installed headers (where
// CMake found them: the values our own declarations must share), and the interface
// filter of NCCL_SOCKET_IFNAME / REMORA_NCCL_IFNAME.
#include <gtest/gtest.h>

#include "interfaces.h"
#include "net_abi.h"

#ifdef REMORA_TEST_HAVE_NCCL_HEADERS
#include "installed_nccl.h"

TEST(NcclAbi, ResultsAndDeviceHandleMatchInstalledHeaders) {
  InstalledNccl n = installed_nccl();
  std::array<int, 8> ours = {ncclSuccess, ncclUnhandledCudaError, ncclSystemError, ncclInternalError,
                             ncclInvalidArgument, ncclInvalidUsage, ncclRemoteError, ncclInProgress};
  EXPECT_EQ(n.results, ours) << "NCCL " << n.version_code;
  EXPECT_EQ(n.device_host, NCCL_NET_DEVICE_HOST);
  EXPECT_EQ(n.device_unpack, NCCL_NET_DEVICE_UNPACK);
  EXPECT_EQ(n.device_handle_size, sizeof(ncclNetDeviceHandle_v8_t));
  EXPECT_EQ(n.device_handle_size_offset, offsetof(ncclNetDeviceHandle_v8_t, size));
  EXPECT_EQ(n.device_handle_proxy_offset, offsetof(ncclNetDeviceHandle_v8_t, needsProxyProgress));
}
#endif

namespace {
using remora::nccl_plugin::IfFilter;

TEST(NcclIfFilter, PrefixesExclusionsAndExactNames) {
  IfFilter inc = IfFilter::parse("eth,ib");
  EXPECT_TRUE(inc.matches("eth0"));
  EXPECT_TRUE(inc.matches("ib1"));
  EXPECT_FALSE(inc.matches("enp1s0"));
  IfFilter exc = IfFilter::parse("^docker,lo");
  EXPECT_FALSE(exc.matches("docker0"));
  EXPECT_FALSE(exc.matches("lo"));
  EXPECT_TRUE(exc.matches("eth0"));
  IfFilter exact = IfFilter::parse("=eth0");
  EXPECT_TRUE(exact.matches("eth0"));
  EXPECT_FALSE(exact.matches("eth01"));
  IfFilter exact_exc = IfFilter::parse("^=eth0, eth1");
  EXPECT_FALSE(exact_exc.matches("eth0"));
  EXPECT_FALSE(exact_exc.matches("eth1"));
  EXPECT_TRUE(exact_exc.matches("eth10"));
  EXPECT_FALSE(IfFilter::parse("").matches("eth0"));  // an empty include list selects nothing
}

TEST(NcclIfFilter, LoopbackIsChosenExactlyAndNamesNothingElse) {
  auto choice = remora::nccl_plugin::choose_devices("=lo", "test");
  ASSERT_EQ(choice.devices.size(), 1u);
  EXPECT_EQ(choice.devices[0].ifname, "lo");
  EXPECT_EQ(choice.devices[0].address, "127.0.0.1");
  EXPECT_TRUE(choice.devices[0].pci_path.empty());  // a virtual interface has no PCI device
  EXPECT_GT(choice.devices[0].speed_mbps, 0);
  EXPECT_TRUE(remora::nccl_plugin::choose_devices("=no-such-interface0", "test").devices.empty());
}

}  // namespace
