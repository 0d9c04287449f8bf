// plugin/nccl/net_abi.h — the NCCL net plugin ABI, versions 8 to 12, written from the
// documented interface (docs/nccl.md; /work/shared/reference/devmem-io_uring-nccl.md,
// section 3). These are our own declarations of the C structures NCCL reads from the
// plugin: their layout is the ABI, so every size and offset that matters is pinned by
// a static_assert below (x86-64 / aarch64 LP64), and tests/nccl/abi_test.cc compares
// the constants with NCCL's installed headers where they exist.
//
// Nothing here includes an NCCL header; the plugin has no build or link dependency on
// NCCL or CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// --- results, logging, constants ------------------------------------------------------

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;

// Subsystem flags of a log line (NCCL_DEBUG_SUBSYS).
enum : unsigned long { NCCL_INIT = 0x1, NCCL_NET = 0x10 };

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);
// v10+: profiler events; the plugin records none and never calls it.
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                               void* extData);

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
#define NCCL_NET_ATTR_UNDEF (-1)
#define NCCL_NET_ID_UNDEF (-1)

typedef enum {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
} ncclNetDeviceType;

// The device-offload handle NCCL may hand to connect/accept; this plugin offers no
// offload (netDeviceType HOST) and leaves it alone.
typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v12_t;

// --- properties -----------------------------------------------------------------------

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;  // Mbps
  int port;
  float latency;  // µs
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

#define NCCL_NET_MAX_DEVS_PER_NIC_V9 4
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V9];
} ncclNetVDeviceProps_v9_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

// v9 and v10 share one layout (forceFlush after regIsGlobal; vProps and the size limits
// at the end).
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

typedef struct {
  int trafficClass;
} ncclNetCommConfig_v10_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v12_t;

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;
typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;

// --- the tables -----------------------------------------------------------------------

#define REMORA_NCCL_COMMON_TAIL(DEVHANDLE)                                                        \
  ncclResult_t (*accept)(void* listenComm, void** recvComm, DEVHANDLE** recvDevComm);            \
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);          \
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, \
                              void** mhandle);                                                    \
  ncclResult_t (*deregMr)(void* comm, void* mhandle);

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** sendDevComm);
  REMORA_NCCL_COMMON_TAIL(ncclNetDeviceHandle_v8_t)
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v9_t** sendDevComm);
  REMORA_NCCL_COMMON_TAIL(ncclNetDeviceHandle_v9_t)
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  REMORA_NCCL_COMMON_TAIL(ncclNetDeviceHandle_v10_t)
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                        void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

#define REMORA_NCCL_V11_TABLE(SUFFIX)                                                                       \
  typedef struct {                                                                                          \
    const char* name;                                                                                       \
    ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_##SUFFIX##_t* config,               \
                         ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);               \
    ncclResult_t (*devices)(int* ndev);                                                                     \
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_##SUFFIX##_t* props);                          \
    ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);                            \
    ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,                              \
                            ncclNetDeviceHandle_##SUFFIX##_t** sendDevComm);                                \
    REMORA_NCCL_COMMON_TAIL(ncclNetDeviceHandle_##SUFFIX##_t)                                               \
    ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,    \
                          void** request);                                                                  \
    ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,    \
                          void** phandles, void** request);                                                 \
    ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request); \
    ncclResult_t (*test)(void* request, int* done, int* sizes);                                             \
    ncclResult_t (*closeSend)(void* sendComm);                                                              \
    ncclResult_t (*closeRecv)(void* recvComm);                                                              \
    ncclResult_t (*closeListen)(void* listenComm);                                                          \
    ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);                            \
    ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);                                    \
    ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_##SUFFIX##_t* props);                           \
    ncclResult_t (*finalize)(void* ctx);                                                                    \
    ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_##SUFFIX##_t* netAttr);                               \
  } ncclNet_##SUFFIX##_t;

REMORA_NCCL_V11_TABLE(v11)
REMORA_NCCL_V11_TABLE(v12)

}  // extern "C"

// --- layout checks (LP64) ---------------------------------------------------------------
static_assert(sizeof(void*) == 8, "the NCCL net ABI is declared here for LP64 targets");
static_assert(sizeof(ncclNetProperties_v8_t) == 64);
static_assert(offsetof(ncclNetProperties_v8_t, guid) == 16);
static_assert(offsetof(ncclNetProperties_v8_t, ptrSupport) == 24);
static_assert(offsetof(ncclNetProperties_v8_t, speed) == 32);
static_assert(offsetof(ncclNetProperties_v8_t, latency) == 40);
static_assert(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56);
static_assert(offsetof(ncclNetProperties_v9_t, forceFlush) == 32);
static_assert(offsetof(ncclNetProperties_v9_t, vProps) == 64);
static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88);
static_assert(offsetof(ncclNetProperties_v9_t, maxCollBytes) == 96);
static_assert(sizeof(ncclNetProperties_v9_t) == 104);
static_assert(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104);
static_assert(sizeof(ncclNetProperties_v11_t) == 112);
static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104);
static_assert(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize) == 120);
static_assert(offsetof(ncclNetProperties_v12_t, railId) == 124);
static_assert(offsetof(ncclNetProperties_v12_t, planeId) == 126);
static_assert(sizeof(ncclNetProperties_v12_t) == 128);
static_assert(sizeof(ncclNetAttr_v11_t) == 44);
static_assert(sizeof(ncclNetDeviceHandle_v8_t) == 32);
// Tables: one pointer per entry, in the documented order.
static_assert(sizeof(ncclNet_v8_t) == 19 * sizeof(void*));
static_assert(offsetof(ncclNet_v8_t, isend) == 10 * sizeof(void*));
static_assert(offsetof(ncclNet_v8_t, test) == 13 * sizeof(void*));
static_assert(offsetof(ncclNet_v8_t, irecvConsumed) == 18 * sizeof(void*));
static_assert(sizeof(ncclNet_v9_t) == 20 * sizeof(void*));
static_assert(sizeof(ncclNet_v10_t) == 20 * sizeof(void*));
static_assert(offsetof(ncclNet_v10_t, connect) == 5 * sizeof(void*));
static_assert(sizeof(ncclNet_v11_t) == 22 * sizeof(void*));
static_assert(offsetof(ncclNet_v11_t, makeVDevice) == 19 * sizeof(void*));
static_assert(offsetof(ncclNet_v11_t, finalize) == 20 * sizeof(void*));
static_assert(offsetof(ncclNet_v12_t, setNetAttr) == 21 * sizeof(void*));
