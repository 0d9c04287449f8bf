// python/src/bind_store.cc — the rendezvous store (remora.StoreServer, remora.Store:
// remora/store.h) and the launcher's environment (remora.LaunchInfo,
// remora.detect_launch: remora/launch.h).
#include <cstdint>
#include <optional>
#include <span>
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

void bind_store_server(nb::module_& m) {
  nb::class_<StoreServerObj>(m, "StoreServer",
                             "Serves the rendezvous store (remora/store.h: a small TCP key-value service that "
                             "ranks use to find each other, hosted by rank 0) on a listening socket with its own "
                             "thread. Closing it (close() or collection) closes every client connection (their "
                             "calls fail with PeerFailed).")
      .def(
          "__init__",
          [](StoreServerObj* self, const std::string& address, nb::object auth_key) {
            Result<std::unique_ptr<StoreServer>> r = Status(StatusCode::kInternal, "unset");
            if (auth_key.is(nb::ellipsis())) {
              nb::gil_scoped_release unlocked;
              r = StoreServer::start(address);
            } else {
              std::optional<AuthKey> key = nb::cast<std::optional<AuthKey>>(auth_key);
              nb::gil_scoped_release unlocked;
              r = StoreServer::start(address, key);
            }
            new (self) StoreServerObj{take(std::move(r))};
          },
          "address"_a = "127.0.0.1:0", "auth_key"_a.none() = nb::ellipsis(),
          "Listens on \"host:port\" (port 0 picks one). auth_key left out: the environment's key "
          "(AuthKey.from_env: REMORA_AUTH_KEY, REMORA_AUTH_KEY_FILE); every client must then authenticate "
          "before its first request is served (an unreadable key is InvalidArgument). An AuthKey, or None "
          "(no authentication): that, ignoring the environment.")
      .def_prop_ro("port", [](StoreServerObj& s) { return s.get().port(); })
      .def_prop_ro(
          "address", [](StoreServerObj& s) { return s.get().address(); }, "\"host:port\" actually bound")
      .def(
          "close",
          [](StoreServerObj& s) {
            nb::gil_scoped_release unlocked;
            s.server.reset();
          },
          "Stops serving; every client's calls fail with PeerFailed.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](StoreServerObj& s, nb::args) {
        nb::gil_scoped_release unlocked;
        s.server.reset();
      });
}

void bind_store_client(nb::module_& m) {
  nb::class_<StoreObj>(m, "Store",
                       "A connection to a StoreServer (remora/store.h). Keys are str (1..1024 bytes), values bytes "
                       "(up to 64 MiB). Every blocking call has a deadline and fails with Timeout naming the "
                       "keys it waited for; a server that went away fails every call with PeerFailed. "
                       "Thread-safe (calls are serialised); every call releases the GIL.")
      .def(
          "__init__",
          [](StoreObj* self, const std::string& address, double timeout, nb::object auth_key) {
            const Duration d = to_duration(timeout);
            Result<std::unique_ptr<Store>> r = Status(StatusCode::kInternal, "unset");
            if (auth_key.is(nb::ellipsis())) {
              nb::gil_scoped_release unlocked;
              r = Store::connect(address, d);
            } else {
              std::optional<AuthKey> key = nb::cast<std::optional<AuthKey>>(auth_key);
              nb::gil_scoped_release unlocked;
              r = Store::connect(address, d, key);
            }
            new (self) StoreObj{take(std::move(r))};
          },
          "address"_a, "timeout"_a = 30.0, "auth_key"_a.none() = nb::ellipsis(),
          "Connects to \"host:port\", retrying until `timeout` seconds (the server may start later): "
          "Timeout / Unreachable with the address. auth_key left out: the environment's key; client and "
          "server then prove to each other that they hold it, and a server without it, with another key, "
          "or one that cannot prove it fails the call with AccessDenied (not retried). An AuthKey, or None "
          "(no key; a server that requires one fails the first request with AccessDenied): that, "
          "ignoring the environment.")
      .def(
          "set",
          [](StoreObj& s, const std::string& key, nb::bytes value) {
            const std::span<const std::byte> v = bytes_of(value);
            Store& st = s.get();
            Status r;
            {
              nb::gil_scoped_release unlocked;
              r = st.set(key, v);
            }
            check(r);
          },
          "key"_a, "value"_a, "Stores `value` (bytes) under `key`.")
      .def(
          "get",
          [](StoreObj& s, const std::string& key, double timeout) {
            const Duration d = to_duration(timeout);
            Store& st = s.get();
            Result<std::vector<std::byte>> r = [&] {
              nb::gil_scoped_release unlocked;
              return st.get(key, d);
            }();
            std::vector<std::byte> v = take(std::move(r));
            return to_bytes(v);
          },
          "key"_a, "timeout"_a = 30.0,
          "Waits up to `timeout` seconds for `key` to exist, then returns its value (bytes).")
      .def(
          "wait",
          [](StoreObj& s, std::vector<std::string> keys, double timeout) {
            const Duration d = to_duration(timeout);
            Store& st = s.get();
            Status r;
            {
              nb::gil_scoped_release unlocked;
              r = st.wait(keys, d);
            }
            check(r);
          },
          "keys"_a, "timeout"_a = 30.0,
          "Waits up to `timeout` seconds until every key exists. Timeout lists the missing ones.")
      .def(
          "wait_missing",
          [](StoreObj& s, std::vector<std::string> keys, double timeout) {
            const Duration d = to_duration(timeout);
            Store& st = s.get();
            Result<std::vector<std::string>> r = [&] {
              nb::gil_scoped_release unlocked;
              return st.wait_missing(keys, d);
            }();
            return take(std::move(r));
          },
          "keys"_a, "timeout"_a = 30.0,
          "Waits up to `timeout` seconds until every key exists; returns the keys still missing then, in "
          "the order given (an empty list: all exist). A timeout is an answer here, not an error.")
      .def(
          "add",
          [](StoreObj& s, const std::string& key, int64_t delta) {
            Store& st = s.get();
            Result<int64_t> r = [&] {
              nb::gil_scoped_release unlocked;
              return st.add(key, delta);
            }();
            return take(std::move(r));
          },
          "key"_a, "delta"_a,
          "Atomically adds `delta` to the signed 64-bit counter at `key` (created as 0) and returns the new "
          "value. A key holding a value that is not a counter is InvalidArgument.")
      .def(
          "check",
          [](StoreObj& s, const std::string& key) {
            Store& st = s.get();
            Result<bool> r = [&] {
              nb::gil_scoped_release unlocked;
              return st.check(key);
            }();
            return take(std::move(r));
          },
          "key"_a, "Whether `key` exists now (never waits).")
      .def(
          "remove",
          [](StoreObj& s, const std::string& key) {
            Store& st = s.get();
            Result<bool> r = [&] {
              nb::gil_scoped_release unlocked;
              return st.remove(key);
            }();
            return take(std::move(r));
          },
          "key"_a, "Removes `key`; True if it existed.")
      .def_prop_ro(
          "local_host", [](StoreObj& s) { return s.get().local_host(); },
          "The local address of this client's connection (\"10.0.0.2\"): the interface through "
          "which the store is reachable, what a rank advertises to others.")
      .def(
          "close",
          [](StoreObj& s) {
            nb::gil_scoped_release unlocked;
            s.store.reset();
          },
          "Closes the connection.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](StoreObj& s, nb::args) {
        nb::gil_scoped_release unlocked;
        s.store.reset();
      });
}

void bind_launch(nb::module_& m) {
  nb::class_<LaunchInfo>(m, "LaunchInfo", "Rank, size and rendezvous address of this process (remora/launch.h).")
      .def_ro("rank", &LaunchInfo::rank)
      .def_ro("size", &LaunchInfo::size)
      .def_ro("local_rank", &LaunchInfo::local_rank)
      .def_ro("local_size", &LaunchInfo::local_size)
      .def_ro("launcher", &LaunchInfo::launcher, "\"remora\", \"torchrun\", \"openmpi\", \"mpich\", \"slurm\"")
      .def_ro("store_address", &LaunchInfo::store_address, "\"host:port\" of the rendezvous store")
      .def("__repr__", [](const LaunchInfo& l) {
        return "LaunchInfo(rank=" + std::to_string(l.rank) + ", size=" + std::to_string(l.size) +
               ", local_rank=" + std::to_string(l.local_rank) + ", local_size=" + std::to_string(l.local_size) +
               ", launcher='" + l.launcher + "', store_address='" + l.store_address + "')";
      });
  m.def(
      "detect_launch", [] { return take(detect_launch()); },
      "Rank, size and store address from the launcher's environment, the first complete set of: "
      "remora (REMORA_RANK, REMORA_WORLD_SIZE, REMORA_LOCAL_RANK), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, "
      "LOCAL_WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_*), MPICH/Hydra (PMI_RANK, PMI_SIZE), Slurm "
      "(SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). The store: REMORA_STORE, else MASTER_ADDR:MASTER_PORT. "
      "InvalidArgument (naming the variable) for a malformed or inconsistent value, or when no launcher "
      "environment is found.");
}

}  // namespace

void bind_store(nb::module_& m) {
  bind_store_server(m);
  bind_store_client(m);
  bind_launch(m);
}

}  // namespace remora::python
