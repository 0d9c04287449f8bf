// The declarations of NIXL's plugin interface (plugin/nixl/nixl_abi.h) against the layout
// verified in the nixl-cu12 1.5.1 binaries: the vtable slot of every virtual function of
// nixlBackendEngine (as an Itanium pointer to a virtual member stores it: 1 + the slot's
// byte offset in the vtable) and the offsets of the base class's private members that the
// agent reads through its inline accessors. tests/nixl/test_plugin.py compares the built
// plugin's vtable with the installed wheel's UCX plugin on every run of the Python step.
#include <cstdint>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "nixl_abi.h"

namespace remora::nixl_plugin {
namespace {

template <typename M>
uint64_t slot_of(M member) {
  static_assert(sizeof(M) == 16, "an Itanium pointer to member function");
  uint64_t word = 0;
  std::memcpy(&word, &member, sizeof word);
  EXPECT_EQ(word % 8, 1u) << "not a virtual function";
  return (word - 1) / 8;  // the vtable's address point is slot 0 (the complete destructor)
}

TEST(NixlAbi, VirtualFunctionsSitInTheSlotsOfNixl141To151) {
  using E = nixlBackendEngine;
  EXPECT_EQ(slot_of(&E::supportsRemote), 2u);
  EXPECT_EQ(slot_of(&E::supportsLocal), 3u);
  EXPECT_EQ(slot_of(&E::supportsNotif), 4u);
  EXPECT_EQ(slot_of(&E::getSupportedMems), 5u);
  EXPECT_EQ(slot_of(&E::registerMem), 6u);
  EXPECT_EQ(slot_of(&E::deregisterMem), 7u);
  EXPECT_EQ(slot_of(&E::connect), 8u);
  EXPECT_EQ(slot_of(&E::disconnect), 9u);
  EXPECT_EQ(slot_of(&E::unloadMD), 10u);
  EXPECT_EQ(slot_of(&E::prepXfer), 11u);
  EXPECT_EQ(slot_of(&E::postXfer), 12u);
  EXPECT_EQ(slot_of(&E::checkXfer), 13u);
  EXPECT_EQ(slot_of(&E::releaseReqH), 14u);
  EXPECT_EQ(slot_of(static_cast<nixl_status_t (E::*)(const nixl_remote_meta_dlist_t&, nixlMemViewH&,
                                                     const nixl_opt_b_args_t*) const>(&E::prepMemView)),
            15u);
  EXPECT_EQ(
      slot_of(
          static_cast<nixl_status_t (E::*)(const nixl_meta_dlist_t&, nixlMemViewH&, const nixl_opt_b_args_t*) const>(
              &E::prepMemView)),
      16u);
  EXPECT_EQ(slot_of(&E::releaseMemView), 17u);
  EXPECT_EQ(slot_of(&E::getPublicData), 18u);
  EXPECT_EQ(slot_of(&E::getConnInfo), 19u);
  EXPECT_EQ(slot_of(&E::loadRemoteConnInfo), 20u);
  EXPECT_EQ(slot_of(&E::loadRemoteMD), 21u);
  EXPECT_EQ(slot_of(&E::loadLocalMD), 22u);
  EXPECT_EQ(slot_of(&E::getNotifs), 23u);
  EXPECT_EQ(slot_of(&E::genNotif), 24u);
  EXPECT_EQ(slot_of(&E::queryMem), 25u);
  EXPECT_EQ(slot_of(&E::estimateXferCost), 26u);
}

/// An engine that only exposes where the base class put its members.
class Probe final : public nixlBackendEngine {
 public:
  using nixlBackendEngine::nixlBackendEngine;
  bool supportsRemote() const override { return false; }
  bool supportsLocal() const override { return false; }
  bool supportsNotif() const override { return false; }
  nixl_mem_list_t getSupportedMems() const override { return {}; }
  nixl_status_t registerMem(const nixlBlobDesc&, const nixl_mem_t&, nixlBackendMD*&) override { return NIXL_SUCCESS; }
  nixl_status_t deregisterMem(nixlBackendMD*) override { return NIXL_SUCCESS; }
  nixl_status_t connect(const std::string&) override { return NIXL_SUCCESS; }
  nixl_status_t disconnect(const std::string&) override { return NIXL_SUCCESS; }
  nixl_status_t unloadMD(nixlBackendMD*) override { return NIXL_SUCCESS; }
  nixl_status_t prepXfer(const nixl_xfer_op_t&, const nixl_meta_dlist_t&, const nixl_meta_dlist_t&, const std::string&,
                         nixlBackendReqH*&, const nixl_opt_b_args_t*) const override {
    return NIXL_SUCCESS;
  }
  nixl_status_t postXfer(const nixl_xfer_op_t&, const nixl_meta_dlist_t&, const nixl_meta_dlist_t&, const std::string&,
                         nixlBackendReqH*&, const nixl_opt_b_args_t*) const override {
    return NIXL_SUCCESS;
  }
  nixl_status_t checkXfer(nixlBackendReqH*) const override { return NIXL_SUCCESS; }
  nixl_status_t releaseReqH(nixlBackendReqH*) const override { return NIXL_SUCCESS; }
  void fail() { initErr = true; }
  const std::string* agent_field() const { return &localAgent; }
  const bool* telemetry_field() const { return &enableTelemetry_; }
};

TEST(NixlAbi, TheBaseClassKeepsItsMembersWhereTheAgentReadsThem) {
  nixl_b_params_t params = {{"address", "127.0.0.1:0"}};
  nixlBackendInitParams init;
  init.localAgent = "agent-a";
  init.type = "REMORA";
  init.customParams = &params;
  init.enableTelemetry_ = true;
  Probe probe(&init);
  const auto* base = reinterpret_cast<const unsigned char*>(static_cast<const nixlBackendEngine*>(&probe));
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(probe.agent_field()) - base, kLocalAgentOffset);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(probe.telemetry_field()) - base, kEnableTelemetryOffset);
  EXPECT_EQ(base[kInitErrOffset], 0);
  probe.fail();
  EXPECT_EQ(base[kInitErrOffset], 1);  // what libnixl.so tests after create_engine
  EXPECT_TRUE(probe.getInitErr());
  EXPECT_EQ(probe.getType(), "REMORA");
  EXPECT_EQ(probe.getCustomParams().at("address"), "127.0.0.1:0");
  EXPECT_EQ(*probe.agent_field(), "agent-a");
  // The type at +0x8, the parameters at +0x28 (the POSIX plugin's inlined constructor).
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(&probe.getType()) - base, 0x8);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(&probe.getCustomParams()) - base, 0x28);
}

/// A list as NIXL fills one: its memory type, then its vector of descriptors.
class ListOfTwo final : public nixlDescList<nixlMetaDesc> {
 public:
  ListOfTwo() {
    type = VRAM_SEG;
    descs = {nixlMetaDesc{{0x1000, 64, 3}, nullptr}, nixlMetaDesc{{0x2000, 32, 3}, nullptr}};
  }
  ptrdiff_t offset_of_type() const { return reinterpret_cast<const char*>(&type) - start(); }
  ptrdiff_t offset_of_descs() const { return reinterpret_cast<const char*>(&descs) - start(); }

 private:
  const char* start() const {
    return reinterpret_cast<const char*>(static_cast<const nixlDescList<nixlMetaDesc>*>(this));
  }
};

TEST(NixlAbi, DescriptorListsAreReadThroughTheirVectorAtOffset16) {
  ListOfTwo two;
  EXPECT_EQ(two.offset_of_type(), 8);    // after the vptr
  EXPECT_EQ(two.offset_of_descs(), 16);  // where the UCX plugin reads begin/end
  const nixlDescList<nixlMetaDesc>& list = two;
  EXPECT_EQ(list.getType(), VRAM_SEG);
  ASSERT_EQ(list.descCount(), 2);
  EXPECT_EQ(list[1].addr, 0x2000u);
  EXPECT_EQ(list[1].len, 32u);
  EXPECT_EQ(list[1].devId, 3u);
}

}  // namespace
}  // namespace remora::nixl_plugin
