// remora/remora.h — everything public, in one include.
#pragma once

#include "remora/capabilities.h"
#include "remora/communicator.h"
#include "remora/config.h"
#include "remora/context.h"
#include "remora/cuda.h"
#include "remora/dmabuf.h"
#include "remora/endpoint.h"
#include "remora/external_store.h"
#include "remora/launch.h"
#include "remora/memory.h"
#include "remora/pool.h"
#include "remora/request.h"
#include "remora/status.h"
#include "remora/store.h"
#include "remora/types.h"
#include "remora/version.h"

