// plugin/nccl/tables.cc — the exported ncclNetPlugin_v8 … ncclNetPlugin_v12 tables: each
// version's signatures adapted to the operations of plugin.h (v8's int sizes widened,
// v10's profiler handles and connect config dropped, v11+'s per-communicator context).
// These five symbols are the plugin's only exports (plugin/nccl/exports.map).
#include <algorithm>
#include <climits>
#include <iterator>

#include "plugin.h"

namespace np = remora::nccl_plugin;

namespace {

template <typename P>
void fill_common(const np::Properties& p, P* out) {
  out->name = p.name;
  out->pciPath = p.pci_path;
  out->guid = p.guid;
  out->ptrSupport = p.ptr_support;
  out->regIsGlobal = p.reg_is_global;
  out->speed = p.speed;
  out->port = p.port;
  out->latency = p.latency;
  out->maxComms = p.max_comms;
  out->maxRecvs = p.max_recvs;
  out->netDeviceType = NCCL_NET_DEVICE_HOST;
  out->netDeviceVersion = 0;
}

template <typename P>
void fill_v9(const np::Properties& p, P* out) {
  fill_common(p, out);
  out->forceFlush = p.force_flush;
  out->vProps.ndevs = static_cast<int>(std::min(p.members.size(), std::size(out->vProps.devs)));
  for (int i = 0; i < out->vProps.ndevs; ++i) out->vProps.devs[i] = p.members[static_cast<size_t>(i)];
  out->maxP2pBytes = p.max_p2p_bytes;
  out->maxCollBytes = p.max_coll_bytes;
}

template <typename P>
ncclResult_t get_props(int dev, P* out) {
  if (out == nullptr) return ncclInvalidArgument;
  np::Properties p;
  ncclResult_t r = np::properties(dev, &p);
  if (r != ncclSuccess) return r;
  *out = P{};
  if constexpr (requires { out->maxP2pBytes; }) {
    fill_v9(p, out);
  } else {
    fill_common(p, out);
  }
  if constexpr (requires { out->maxMultiRequestSize; }) out->maxMultiRequestSize = p.max_multi_request_size;
  if constexpr (requires { out->railId; }) {
    out->railId = NCCL_NET_ID_UNDEF;
    out->planeId = NCCL_NET_ID_UNDEF;
  }
  return ncclSuccess;
}

template <typename VProps>
ncclResult_t make_vdevice(int* d, VProps* props) {
  if (props == nullptr) return ncclInvalidArgument;
  return np::make_vdevice(d, props->devs, props->ndevs, static_cast<int>(std::size(props->devs)));
}

// v8: int sizes.
ncclResult_t isend_v8(void* comm, void* data, int size, int tag, void* mh, void** req) {
  if (size < 0) return ncclInvalidArgument;
  return np::isend(comm, data, static_cast<size_t>(size), tag, mh, req);
}
ncclResult_t irecv_v8(void* comm, int n, void** data, int* sizes, int* tags, void** mh, void** req) {
  if (n < 1 || n > np::kMaxRecvs || sizes == nullptr) return np::irecv(comm, n, data, nullptr, tags, mh, req);
  size_t wide[np::kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    wide[i] = static_cast<size_t>(sizes[i]);
  }
  return np::irecv(comm, n, data, wide, tags, mh, req);
}
// v9.
ncclResult_t irecv_v9(void* comm, int n, void** data, size_t* sizes, int* tags, void** mh, void** req) {
  return np::irecv(comm, n, data, sizes, tags, mh, req);
}
// v10+: profiler handles, unused.
ncclResult_t isend_v10(void* comm, void* data, size_t size, int tag, void* mh, void* /*ph*/, void** req) {
  return np::isend(comm, data, size, tag, mh, req);
}
ncclResult_t irecv_v10(void* comm, int n, void** data, size_t* sizes, int* tags, void** mh, void** /*ph*/,
                       void** req) {
  return np::irecv(comm, n, data, sizes, tags, mh, req);
}
ncclResult_t init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t /*prof*/) { return np::init(log); }
ncclResult_t connect_v8(int dev, void* handle, void** comm, ncclNetDeviceHandle_v8_t** /*dev_comm*/) {
  return np::connect(dev, handle, comm);
}
ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t* /*config*/, void* handle, void** comm,
                         ncclNetDeviceHandle_v10_t** /*dev_comm*/) {
  return np::connect(dev, handle, comm);
}
ncclResult_t accept_any(void* listen_comm, void** comm, ncclNetDeviceHandle_v8_t** /*dev_comm*/) {
  return np::accept(listen_comm, comm);
}
// v11+: a per-communicator context.
ncclResult_t init_v11(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t log,
                      ncclProfilerCallback_t /*prof*/) {
  return np::init_comm(ctx, comm_id, config != nullptr ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, log);
}
ncclResult_t listen_v11(void* /*ctx*/, int dev, void* handle, void** comm) { return np::listen(dev, handle, comm); }
ncclResult_t connect_v11(void* /*ctx*/, int dev, void* handle, void** comm, ncclNetDeviceHandle_v11_t** /*dc*/) {
  return np::connect(dev, handle, comm);
}
ncclResult_t set_attr_v11(void* ctx, ncclNetAttr_v11_t* attr) { return np::set_net_attr(ctx, attr); }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8 = {
    "remora", np::init, np::devices, get_props<ncclNetProperties_v8_t>, np::listen, connect_v8, accept_any,
    np::reg_mr, np::reg_mr_dmabuf, np::dereg_mr, isend_v8, irecv_v8, np::iflush, np::test, np::close_send,
    np::close_recv, np::close_listen, np::get_device_mr, np::irecv_consumed};

__attribute__((visibility("default"))) ncclNet_v9_t ncclNetPlugin_v9 = {
    "remora",          np::init,          np::devices,        get_props<ncclNetProperties_v9_t>,
    np::listen,        connect_v8,        accept_any,         np::reg_mr,
    np::reg_mr_dmabuf, np::dereg_mr,      np::isend,          irecv_v9,
    np::iflush,        np::test,          np::close_send,     np::close_recv,
    np::close_listen,  np::get_device_mr, np::irecv_consumed, make_vdevice<ncclNetVDeviceProps_v9_t>};

__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = {
    "remora",          init_v10,          np::devices,        get_props<ncclNetProperties_v10_t>,
    np::listen,        connect_v10,       accept_any,         np::reg_mr,
    np::reg_mr_dmabuf, np::dereg_mr,      isend_v10,          irecv_v10,
    np::iflush,        np::test,          np::close_send,     np::close_recv,
    np::close_listen,  np::get_device_mr, np::irecv_consumed, make_vdevice<ncclNetVDeviceProps_v10_t>};

__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = {
    "remora",          init_v11,          np::devices,        get_props<ncclNetProperties_v11_t>,
    listen_v11,        connect_v11,       accept_any,         np::reg_mr,
    np::reg_mr_dmabuf, np::dereg_mr,      isend_v10,          irecv_v10,
    np::iflush,        np::test,          np::close_send,     np::close_recv,
    np::close_listen,  np::get_device_mr, np::irecv_consumed, make_vdevice<ncclNetVDeviceProps_v11_t>,
    np::finalize,      set_attr_v11};

__attribute__((visibility("default"))) ncclNet_v12_t ncclNetPlugin_v12 = {
    "remora",          init_v11,          np::devices,        get_props<ncclNetProperties_v12_t>,
    listen_v11,        connect_v11,       accept_any,         np::reg_mr,
    np::reg_mr_dmabuf, np::dereg_mr,      isend_v10,          irecv_v10,
    np::iflush,        np::test,          np::close_send,     np::close_recv,
    np::close_listen,  np::get_device_mr, np::irecv_consumed, make_vdevice<ncclNetVDeviceProps_v12_t>,
    np::finalize,      set_attr_v11};

}  // extern "C"
