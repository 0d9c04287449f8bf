// python/src/bind_endpoint.cc — remora.Listener, remora.Notification and
// remora.Endpoint: connections to one peer, with tagged two-sided messages and one-sided
// remote memory access (put, get, batches, atomics, flush, notifications).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "binding.h"

namespace remora::python {

namespace {

using namespace nb::literals;

/// Endpoint.stats(): every EndpointStats field, by its name.
nb::dict stats_dict(const EndpointStats& s) {
  nb::dict d;
  d["messages_sent"] = s.messages_sent;
  d["messages_received"] = s.messages_received;
  d["bytes_sent"] = s.bytes_sent;
  d["bytes_received"] = s.bytes_received;
  d["eager_sent"] = s.eager_sent;
  d["rendezvous_sent"] = s.rendezvous_sent;
  d["chunks_sent"] = s.chunks_sent;
  d["chunks_per_stream"] = s.chunks_per_stream;
  nb::list rails;
  for (const RailStats& r : s.rails) {
    nb::dict rail;
    rail["local_address"] = r.local_address;
    rail["peer_address"] = r.peer_address;
    rail["interface"] = r.interface;
    rail["streams"] = r.streams;
    rail["bytes_sent"] = r.bytes_sent;
    rail["bytes_received"] = r.bytes_received;
    rail["chunks_sent"] = r.chunks_sent;
    rail["chunks_received"] = r.chunks_received;
    rail["streams_retired"] = r.streams_retired;
    rail["state"] = r.state;
    rail["reason"] = r.reason;
    rails.append(rail);
  }
  d["rails"] = rails;
  d["failover"] = s.failover;
  d["streams_retired"] = s.streams_retired;
  d["streams_rejoined"] = s.streams_rejoined;
  d["control_resumed"] = s.control_resumed;
  d["worker_jobs"] = s.worker_jobs;
  d["worker_bytes"] = s.worker_bytes;
  d["worker_send_jobs"] = s.worker_send_jobs;
  d["worker_send_bytes"] = s.worker_send_bytes;
  d["chunks_resent"] = s.chunks_resent;
  d["chunks_pulled"] = s.chunks_pulled;
  d["bytes_pulled"] = s.bytes_pulled;
  d["huge_pages_promoted"] = s.huge_pages_promoted;
  d["same_host_reason"] = s.same_host_reason;
  d["shm_tx"] = s.shm_tx;
  d["shm_rx"] = s.shm_rx;
  d["shm_reason"] = s.shm_reason;
  d["direct"] = s.direct;
  d["direct_reason"] = s.direct_reason;
  d["encryption"] = s.encryption;
  d["control_address"] = s.control_address;
  d["puts"] = s.puts;
  d["gets"] = s.gets;
  d["atomics"] = s.atomics;
  d["rma_bytes_put"] = s.rma_bytes_put;
  d["rma_bytes_got"] = s.rma_bytes_got;
  d["served_puts"] = s.served_puts;
  d["served_gets"] = s.served_gets;
  d["served_atomics"] = s.served_atomics;
  d["segmented"] = s.segmented;
  d["served_segmented"] = s.served_segmented;
  d["refused"] = s.refused;
  d["notifications"] = s.notifications;
  d["staged_transfers"] = s.staged_transfers;
  d["staged_bytes"] = s.staged_bytes;
  d["devmem_transfers"] = s.devmem_transfers;
  d["zcrx_transfers"] = s.zcrx_transfers;
  d["device_path_refusals"] = s.device_path_refusals;
  d["device_path"] = s.device_path;
  d["device_path_reason"] = s.device_path_reason;
  return d;
}

/// The RemoteKey of a batch item; InvalidArgument for anything else.
const RemoteKey& key_of(nb::handle key) {
  if (!nb::isinstance<RemoteKey>(key)) {
    raise(Status(StatusCode::kInvalidArgument, "expected a remora.RemoteKey (RemoteKey.from_bytes makes one)"));
  }
  return nb::cast<const RemoteKey&>(key);
}

/// The (buffer, key, offset) items of put_batch / get_batch (`writable`: get_batch
/// writes into the buffers), with what holds each buffer appended to `holders`.
std::vector<TransferItem> transfer_items(nb::iterable items, bool writable, Holders& holders) {
  std::vector<TransferItem> list;
  for (nb::handle item : items) {
    nb::tuple t = nb::cast<nb::tuple>(item);
    if (t.size() != 3) raise(Status(StatusCode::kInvalidArgument, "a batch item is (buffer, key, offset)"));
    Memory m = memory_of(t[0], writable);
    list.push_back({m.span(), key_of(t[1]), nb::cast<uint64_t>(t[2])});
    holders.push_back(m.holder);
  }
  return list;
}

void bind_listener(nb::module_& m) {
  nb::class_<ListenerObj>(m, "Listener", "Accepts endpoints connected to a listening address.")
      .def(
          "accept",
          [](ListenerObj& l, std::optional<double> timeout) {
            const Duration d = to_duration(timeout);
            Result<std::shared_ptr<Endpoint>> r = [&] {
              nb::gil_scoped_release unlocked;
              return l.get().accept(d);
            }();
            return EndpointObj{take(std::move(r))};
          },
          "timeout"_a = nb::none(),
          "Next endpoint whose handshake completed, waiting up to `timeout` seconds (GIL released): "
          "remora.Timeout when none did; Aborted once the listener is closed.",
          nb::keep_alive<0, 1>())
      .def_prop_ro(
          "address", [](ListenerObj& l) { return l.get().address(); }, "\"host:port\" actually bound")
      .def_prop_ro("port", [](ListenerObj& l) { return l.get().port(); })
      .def(
          "close",
          [](ListenerObj& l) {
            nb::gil_scoped_release unlocked;
            l.listener.reset();
          },
          "Stops listening; endpoints already accepted stay up.");
}

void bind_notification(nb::module_& m) {
  nb::class_<Notification>(m, "Notification", "A notification delivered by a put (or batch) with notify=.")
      .def_ro("value", &Notification::value, "the 64-bit value the initiator sent")
      .def_prop_ro(
          "region", [](const Notification& n) { return static_cast<uint32_t>(n.region); },
          "the id of the region the put wrote (Region.id)")
      .def_ro("offset", &Notification::offset, "where in the region (bytes from the region's start)")
      .def_ro("length", &Notification::length, "bytes the put wrote")
      .def("__repr__", [](const Notification& n) {
        return "Notification(value=" + std::to_string(n.value) +
               ", region=" + std::to_string(static_cast<uint32_t>(n.region)) + ", offset=" + std::to_string(n.offset) +
               ", length=" + std::to_string(n.length) + ")";
      });
}

/// send and recv: tagged two-sided messages.
void bind_messages(nb::class_<EndpointObj>& cls) {
  cls.def(
         "send",
         [](EndpointObj& e, nb::handle buf, uint64_t tag) {
           Memory m = memory_of(buf, false);
           return post([&] { return e.ep->send(m.span(), Tag{tag}); }, {m.holder});
         },
         "buf"_a, "tag"_a,
         "Sends `buf` with `tag` (no copy). The buffer is held until the request completes (when the "
         "bytes are in the kernel or copied, not when the peer received them). Messages with the same tag "
         "are received in send order.")
      .def(
          "recv",
          [](EndpointObj& e, nb::handle buf, uint64_t tag) {
            Memory m = memory_of(buf, true);
            return post([&] { return e.ep->recv(m.span(), Tag{tag}); }, {m.holder});
          },
          "buf"_a, "tag"_a,
          "Posts a receive of a message with `tag` into `buf` (in place). A message longer than the "
          "buffer completes the request with Truncated and no byte of it is written. Request.bytes is "
          "the message's length.");
}

/// One-sided remote memory access: put, get, their batches, atomics, flush and the
/// notifications puts deliver.
void bind_remote_access(nb::class_<EndpointObj>& cls) {
  cls.def(
         "put",
         [](EndpointObj& e, nb::handle buf, const RemoteKey& key, uint64_t offset, std::optional<uint64_t> notify) {
           Memory m = memory_of(buf, false);
           const RemoteKey& k = key;
           return post([&] { return e.ep->put(m.span(), k, offset, PutOptions{.notify = notify}); }, {m.holder});
         },
         "buf"_a, "key"_a, "offset"_a = 0, "notify"_a = nb::none(),
         "Writes `buf` into the peer's memory at `offset` within `key`'s window. Completes when the TARGET "
         "placed every byte (and, with notify=, queued the notification: a 64-bit value the target gets "
         "exactly once, after the data). Errors from the target: InvalidKey (forged, stale or unknown "
         "key), OutOfRange, AccessDenied (no remote-write right), NoResource (the target's notification "
         "queue is full; nothing was written). Puts and gets are not ordered with each other; flush() is "
         "the fence.")
      .def(
          "get",
          [](EndpointObj& e, nb::handle buf, const RemoteKey& key, uint64_t offset) {
            Memory m = memory_of(buf, true);
            const RemoteKey& k = key;
            return post([&] { return e.ep->get(m.span(), k, offset); }, {m.holder});
          },
          "buf"_a, "key"_a, "offset"_a = 0,
          "Reads the peer's memory at `offset` within `key`'s window into `buf` (len(buf) bytes, in place). "
          "Needs the remote-read right. Not covered by flush(): wait on its request.")
      .def(
          "put_batch",
          [](EndpointObj& e, nb::iterable items, std::optional<uint64_t> notify) {
            Holders holders;
            std::vector<TransferItem> list = transfer_items(items, false, holders);
            return post([&] { return e.ep->put_batch(list, PutOptions{.notify = notify}); }, std::move(holders));
          },
          "items"_a, "notify"_a = nb::none(),
          "Posts one put per (buffer, key, offset) item, all at once, and returns one Request that completes "
          "when every put has completed at the target, with the failure of the lowest-numbered item that "
          "failed (others still land). With notify=, the target receives exactly one notification, only "
          "after every item's bytes are visible: it is sent (a zero-length put at the LAST item's key and "
          "offset) once all the puts succeeded, and not at all if one failed. Items may name different "
          "regions of the peer.")
      .def(
          "get_batch",
          [](EndpointObj& e, nb::iterable items) {
            Holders holders;
            std::vector<TransferItem> list = transfer_items(items, true, holders);
            return post([&] { return e.ep->get_batch(list); }, std::move(holders));
          },
          "items"_a,
          "Posts one get per (buffer, key, offset) item, all at once; one Request that completes when every "
          "byte is in place, or with the failure of the lowest-numbered item that failed.")
      .def(
          "fetch_add",
          [](EndpointObj& e, const RemoteKey& key, uint64_t offset, uint64_t value) {
            const RemoteKey& k = key;
            auto result = std::make_shared<uint64_t>(0);
            return post([&] { return e.ep->fetch_add(result.get(), k, offset, value); }, {}, result);
          },
          "key"_a, "offset"_a, "value"_a,
          "Atomically adds `value` to the u64 at `offset`; Request.value is the previous value once done. "
          "The word must be 8-byte aligned in the target's address space (InvalidArgument otherwise) and "
          "the key must grant remote atomics.")
      .def(
          "compare_swap",
          [](EndpointObj& e, const RemoteKey& key, uint64_t offset, uint64_t expected, uint64_t desired) {
            const RemoteKey& k = key;
            auto result = std::make_shared<uint64_t>(0);
            return post([&] { return e.ep->compare_swap(result.get(), k, offset, {expected, desired}); }, {}, result);
          },
          "key"_a, "offset"_a, "expected"_a, "desired"_a,
          "Atomically replaces the u64 at `offset` with `desired` if it equals `expected`; Request.value is "
          "the previous value either way (so the swap happened exactly when value == expected).")
      .def(
          "flush", [](EndpointObj& e) { return post([&] { return e.ep->flush(); }, {}); },
          "Completes when every put and atomic posted on this endpoint before the call has completed at the "
          "target; raises the first failure among them (so fire-and-forget puts still report errors).")
      .def(
          "poll_notification",
          [](EndpointObj& e) {
            nb::gil_scoped_release unlocked;
            return e.ep->poll_notification();
          },
          "The oldest undelivered notification, or None. Drives progress once.")
      .def(
          "wait_notification",
          [](EndpointObj& e, std::optional<double> timeout) {
            const Duration d = to_duration(timeout);
            Result<Notification> n = [&] {
              nb::gil_scoped_release unlocked;
              return e.ep->wait_notification(d);
            }();
            return take(std::move(n));
          },
          "timeout"_a = nb::none(),
          "Waits up to `timeout` seconds for a notification (GIL released). remora.Timeout when none "
          "arrived; the endpoint's failure once it failed and the queue is empty.");
}

/// The endpoint's state, counters and end: close, abort, failure, stats, a context
/// manager.
void bind_endpoint_state(nb::class_<EndpointObj>& cls) {
  cls.def(
         "close",
         [](EndpointObj& e) {
           nb::gil_scoped_release unlocked;
           e.ep->close();
         },
         "Closes the endpoint: outstanding requests fail with Aborted; the peer sees an orderly close and "
         "can still receive what this side sent before. Idempotent.")
      .def(
          "abort",
          [](EndpointObj& e) {
            nb::gil_scoped_release unlocked;
            e.ep->abort();
          },
          "Like close(), but the peer fails as if this side had died.")
      .def_prop_ro(
          "failed", [](const EndpointObj& e) { return e.ep->failed(); },
          "True once the endpoint has failed for good (peer gone, closed or aborted).")
      .def_prop_ro(
          "closed_by_peer", [](const EndpointObj& e) { return e.ep->closed_by_peer(); },
          "True once the endpoint failed because the peer called close().")
      .def_prop_ro(
          "failure",
          [](const EndpointObj& e) -> nb::object {
            Status s = e.ep->failure();
            if (s.is_ok()) return nb::none();
            return error_object(s);
          },
          "Why the endpoint failed, as a remora.Error instance (not raised), or None.")
      .def_prop_ro("id", [](const EndpointObj& e) { return static_cast<uint64_t>(e.ep->id()); })
      .def_prop_ro("peer_address", [](const EndpointObj& e) { return e.ep->peer_address(); })
      .def_prop_ro("data_streams", [](const EndpointObj& e) { return e.ep->data_streams(); })
      .def_prop_ro(
          "peer_said_goodbye", [](const EndpointObj& e) { return e.ep->peer_said_goodbye(); },
          "True once the peer sent GOODBYE, with close() or abort(): it was alive when the endpoint "
          "ended. An endpoint that failed with PeerFailed without it lost a peer that died, was cut "
          "off or fell silent (EOF, reset, REMORA_PEER_TIMEOUT_MS). Communicator.failed_ranks() tells "
          "a dead rank from a survivor that gave up this way.")
      .def(
          "stats", [](const EndpointObj& e) { return stats_dict(e.ep->stats()); },
          "A snapshot of the counters (EndpointStats, remora/endpoint.h) as a dict: messages_sent, "
          "messages_received, bytes_sent, bytes_received, eager_sent, rendezvous_sent, chunks_sent, "
          "chunks_per_stream (a list, one per data stream), rails (a list of dicts, one per rail: local_address, "
          "peer_address, interface, streams, bytes_sent, bytes_received, chunks_sent, chunks_received, "
          "streams_retired, state, reason), failover, streams_retired, streams_rejoined and chunks_resent (data "
          "streams that broke and were given up, those connected again, chunks sent again on the others: "
          "docs/rails.md), control_resumed (times the control stream broke and was connected again), worker_jobs and "
          "worker_bytes (chunk parts and bytes workers took off the data streams), worker_send_jobs and "
          "worker_send_bytes (those workers put on them: REMORA_PROGRESS_THREADS), chunks_pulled and "
          "bytes_pulled "
          "(same-host "
          "pulls: chunks this side announced for the peer to read out of its memory, bytes this side read "
          "out of the peer's), huge_pages_promoted (2 MiB frames of this side's memory the peer pulled again "
          "and again, collapsed into huge pages), same_host_reason (why this side does not read the peer's memory, '' "
          "when it "
          "does), shm_tx and shm_rx (whether the control stream runs in shared memory to and from the peer), "
          "shm_reason (why not, '' when it does both ways), direct and direct_reason (puts and gets done as a copy "
          "through a mapping of the same-host peer's pool memory, and why a key was not mapped), encryption (the "
          "cipher sealing the endpoint's "
          "connections, '' when they are in clear), control_address (this side's address:port of the control "
          "stream), puts, gets, atomics, rma_bytes_put, "
          "rma_bytes_got, served_puts, served_gets, served_atomics, refused (operations this side refused "
          "as the target), notifications (delivered to this side), staged_transfers and staged_bytes "
          "(device-memory transfers through pinned staging buffers), devmem_transfers and zcrx_transfers "
          "(device transfers by devmem TCP, message sends and chunked puts / by io_uring zero-copy "
          "receive, 0 in this version), "
          "device_path_refusals (device transfers refused because the path REMORA_DEVICE_PATH demands "
          "could not take them), device_path (the path the last device-memory transfer took: "
          "\"staging\", \"devmem\", \"zcrx\", \"refused\"; empty before the first) and "
          "device_path_reason (why; names each faster path passed over).")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](EndpointObj& e, nb::args) {
        nb::gil_scoped_release unlocked;
        e.ep->close();
      });
}

void bind_endpoint_class(nb::module_& m) {
  nb::class_<EndpointObj> cls(m, "Endpoint",
                              "A connection to one peer: tagged two-sided messaging and one-sided remote memory "
                              "access (put, get, notify, atomics, flush). Thread-safe (remora/endpoint.h).");
  bind_messages(cls);
  bind_remote_access(cls);
  bind_endpoint_state(cls);
}

}  // namespace

void bind_endpoint(nb::module_& m) {
  bind_listener(m);
  bind_notification(m);
  bind_endpoint_class(m);
}

}  // namespace remora::python
