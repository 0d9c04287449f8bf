// plugin/nccl/plugin.h — the NCCL net plugin's operations, once, in terms of the widest
// argument types of every ABI version; tables.cc adapts them to each ncclNet_vN table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "net_abi.h"

namespace remora::nccl_plugin {

/// Largest grouped receive (irecv n) the plugin accepts, and so maxRecvs.
inline constexpr int kMaxRecvs = 8;

/// Device properties in the widest form (v12); each version copies what it has.
struct Properties {
  char* name = nullptr;
  char* pci_path = nullptr;
  uint64_t guid = 0;
  int ptr_support = NCCL_PTR_HOST;
  int reg_is_global = 1;
  int force_flush = 0;
  int speed = 0;
  int port = 0;
  float latency = 0;
  int max_comms = 0;
  int max_recvs = kMaxRecvs;
  size_t max_p2p_bytes = 0;
  size_t max_coll_bytes = 0;
  int max_multi_request_size = 1;
  /// vProps: the physical devices this one is ({dev} for a physical device).
  std::vector<int> members;
};

ncclResult_t init(ncclDebugLogger_t log);
ncclResult_t init_comm(void** ctx, uint64_t comm_id, int traffic_class, ncclDebugLogger_t log);
ncclResult_t finalize(void* ctx);
ncclResult_t devices(int* ndev);
ncclResult_t properties(int dev, Properties* props);
/// makeVDevice (v9+): fuses physical devices `devs` into one (see docs/nccl.md); `max_devs`
/// is the calling table's NCCL_NET_MAX_DEVS_PER_NIC.
ncclResult_t make_vdevice(int* d, const int* devs, int ndevs, int max_devs);
ncclResult_t listen(int dev, void* handle, void** listen_comm);
ncclResult_t connect(int dev, void* handle, void** send_comm);
ncclResult_t accept(void* listen_comm, void** recv_comm);
ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
ncclResult_t dereg_mr(void* comm, void* mhandle);
ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request);
ncclResult_t irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                   void** request);
ncclResult_t iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t test(void* request, int* done, int* sizes);
ncclResult_t close_send(void* send_comm);
ncclResult_t close_recv(void* recv_comm);
ncclResult_t close_listen(void* listen_comm);
ncclResult_t get_device_mr(void* comm, void* mhandle, void** dptr_mhandle);
ncclResult_t irecv_consumed(void* recv_comm, int n, void* request);
ncclResult_t set_net_attr(void* ctx, const ncclNetAttr_v11_t* attr);

}  // namespace remora::nccl_plugin
