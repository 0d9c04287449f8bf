// python/src/bind_collectives.cc — remora.Communicator: a group of ranks, its
// lifecycle (init, split, shrink, failed_ranks, abort) and every collective with its
// i-form. The element type and count of each call come from its buffers (dtype=
// overrides); None is MPI's in place.
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "binding.h"

namespace remora::python {

namespace {

using namespace nb::literals;

/// One collective buffer argument: None (absent or in place) or memory.
struct Arg {
  std::optional<Memory> mem;
  void* ptr() const { return mem ? static_cast<void*>(mem->data) : nullptr; }
};

Arg arg(nb::handle obj, bool writable) {
  Arg a;
  if (!obj.is_none()) a.mem = memory_of(obj, writable);
  return a;
}

/// The element type of the call: the first buffer that names one (dtype overrides).
DataType type_of(std::optional<std::string> dtype, std::initializer_list<const Arg*> args) {
  if (dtype) return take(parse_data_type(*dtype));
  std::optional<DataType> found;
  bool any = false;
  for (const Arg* a : args) {
    if (!a->mem) continue;
    any = true;
    if (!a->mem->type) continue;
    if (found && *found != *a->mem->type) {
      raise(Status(StatusCode::kInvalidArgument,
                   std::string("the buffers have different element types (") + std::string(to_string(*found)) + ", " +
                       std::string(to_string(*a->mem->type)) + "): pass dtype= to say which"));
    }
    found = a->mem->type;
  }
  if (!found) {
    if (!any) return DataType::kUint8;
    raise(Status(StatusCode::kInvalidArgument,
                 "the buffers' element type is not one remora reduces or moves (int8, uint8, int32, uint32, int64, "
                 "uint64, float16, bfloat16, float32, float64): pass dtype= (e.g. 'uint8' for raw bytes)"));
  }
  return *found;
}

size_t count_of(const Arg& a, DataType t) {
  if (!a.mem) return 0;
  const size_t sz = size_of(t);
  if (a.mem->size % sz != 0) {
    raise(Status(StatusCode::kInvalidArgument, "a buffer of " + std::to_string(a.mem->size) +
                                                   " bytes is not a whole number of " + std::string(to_string(t)) +
                                                   " elements"));
  }
  return a.mem->size / sz;
}

Holders holders_of(std::initializer_list<const Arg*> args) {
  Holders h;
  for (const Arg* a : args) {
    if (a->mem) h.push_back(a->mem->holder);
  }
  return h;
}

CollectiveOptions coll_options(std::optional<std::string> algorithm, std::optional<double> timeout) {
  CollectiveOptions o;
  if (algorithm) o.algorithm = take(parse_coll_algorithm(*algorithm));
  o.timeout = to_optional_duration(timeout);
  return o;
}

/// A size_t vector that lives as long as the operation (v-forms read it while running).
std::shared_ptr<std::vector<size_t>> counts(const std::vector<size_t>& v, Holders& holders) {
  auto p = std::make_shared<std::vector<size_t>>(v);
  auto h = std::make_shared<Holder>();
  h->extra = p;
  holders.push_back(std::move(h));
  return p;
}

/// Blocking form: post, then wait without a bound of its own (the collective is bounded
/// by the communicator's timeout), GIL released.
nb::object finish(RequestObj r, bool blocking) {
  if (!blocking) return nb::cast(std::move(r));
  wait_request(r, std::numeric_limits<double>::infinity());
  return nb::none();
}

nb::object scan_impl(CommObj& c, bool blocking, bool exclusive, nb::handle send, nb::handle recv, const std::string& op,
                     std::optional<std::string> dtype, std::optional<std::string> algorithm,
                     std::optional<double> timeout) {
  Arg s = arg(send, false);
  const bool in_place = recv.is_none() || recv.is(send);
  Arg r = in_place ? arg(send, true) : arg(recv, true);
  DataType t = type_of(dtype, {&s, &r});
  size_t n = count_of(r, t);
  ReduceOp rop = take(parse_reduce_op(op));
  auto o = coll_options(algorithm, timeout);
  const void* sp = in_place ? kInPlace : s.ptr();
  return finish(post(
                    [&] {
                      return exclusive ? c.get().iexscan(sp, r.ptr(), n, t, rop, o)
                                       : c.get().iscan(sp, r.ptr(), n, t, rop, o);
                    },
                    holders_of({&s, &r})),
                blocking);
}

/// Defines collective `name` twice: i<name> (returns a Request) and <name> (blocking).
template <typename... A, typename... Extra>
void both(nb::class_<CommObj>& cls, const char* name, nb::object (*fn)(CommObj&, bool, A...), const char* doc,
          const Extra&... extra) {
  const char* iname = (new std::string(std::string("i") + name))->c_str();  // names live as long as the module
  cls.def(
      iname, [fn](CommObj& c, A... a) { return fn(c, false, std::move(a)...); }, extra..., doc);
  cls.def(
      name, [fn](CommObj& c, A... a) { return fn(c, true, std::move(a)...); }, extra..., doc);
}

/// Joining, the communicator's state, split / shrink, abort and close.
void bind_communicator(nb::class_<CommObj>& comm) {
  comm.def(
      "__init__",
      [](CommObj* self, ContextObj& ctx, std::optional<int> rank, std::optional<int> size,
         std::optional<std::string> store, std::optional<double> timeout) {
        CommOptions o;
        o.timeout = to_optional_duration(timeout);
        Context& c = ctx.get();
        Result<std::unique_ptr<Communicator>> r = Status(StatusCode::kInternal, "unset");
        if (rank || size || store) {
          if (!rank || !size || !store) {
            raise(Status(StatusCode::kInvalidArgument,
                         "rank, size and store go together (or none of them: "
                         "the launcher's environment)"));
          }
          LaunchInfo li;
          li.rank = *rank;
          li.size = *size;
          li.local_rank = *rank;
          li.local_size = *size;
          li.launcher = "python";
          li.store_address = *store;
          nb::gil_scoped_release unlocked;
          r = Communicator::init(c, li, o);
        } else {
          nb::gil_scoped_release unlocked;
          r = Communicator::init(c, o);
        }
        new (self) CommObj{take(std::move(r))};
      },
      "context"_a, "rank"_a = nb::none(), "size"_a = nb::none(), "store"_a = nb::none(), "timeout"_a = nb::none(),
      "Joins the group (GIL released). Without rank/size/store: from the launcher's environment "
      "(remora run, torchrun, Open MPI, MPICH, Slurm; remora/launch.h). Rank 0 hosts the rendezvous "
      "store at `store` (\"host:port\"). timeout: seconds bounding every operation and the rendezvous "
      "(None: REMORA_COLL_TIMEOUT_MS).",
      nb::keep_alive<1, 2>());
  comm.def_prop_ro("rank", [](CommObj& c) { return c.get().rank(); })
      .def_prop_ro("size", [](CommObj& c) { return c.get().size(); })
      .def_prop_ro(
          "id", [](CommObj& c) { return c.get().id(); },
          "Unique among the communicators of this job that share a rank with this one.")
      .def_prop_ro(
          "epoch", [](CommObj& c) { return c.get().epoch(); },
          "0 for communicators made by init and split from them; a fresh value, the same on every "
          "member, for each made by shrink (and the splits of that one).")
      .def(
          "connections",
          [](CommObj& c) {
            ConnectionStats st;
            {
              Communicator& cm = c.get();
              nb::gil_scoped_release unlocked;
              st = cm.connections();
            }
            nb::dict d;
            d["peers"] = st.peers;
            d["sockets"] = st.sockets;
            d["sealed_peers"] = st.sealed_peers;
            d["descriptors"] = st.descriptors;
            d["descriptor_limit"] = st.descriptor_limit;
            d["segment_ranks"] = st.segment_ranks;
            d["no_segment"] = st.no_segment;
            return d;
          },
          "What this rank holds to reach the others (Communicator::connections): a dict of peers "
          "(ranks it has an endpoint to), sockets (of those endpoints), sealed_peers (of those ranks, the ones "
          "whose connections are sealed: REMORA_ENCRYPT), descriptors (this process's open "
          "file descriptors), descriptor_limit (its soft RLIMIT_NOFILE), segment_ranks (how many ranks map "
          "this rank's shared segment, itself included; 0: none) and no_segment (why it has none). A "
          "communicator made by init connects to a rank when something first needs it (docs/scaling.md).")
      .def(
          "failed_ranks",
          [](CommObj& c, double timeout) {
            const Duration d = to_duration(timeout);
            Communicator& cm = c.get();
            nb::gil_scoped_release unlocked;
            return cm.failed_ranks(d);
          },
          "timeout"_a = 5.0,
          "Ranks of this communicator this rank believes dead, ascending (GIL released). While the "
          "communicator is healthy: those whose endpoint ended without a GOODBYE (process killed, host "
          "gone, reset, silent past REMORA_PEER_TIMEOUT_MS). Once it is broken (a collective failed): "
          "each rank whose endpoint ended without its GOODBYE is asked, at the listener it opened at init, "
          "for a handshake, all at once; a refusal or no answer within `timeout` seconds makes it dead, an "
          "answer alive. So after a rank was killed every survivor sees the same list. Local knowledge "
          "still: when failures keep racing, ranks may see different sets; make them agree before "
          "passing a list to shrink. Blocks up to `timeout` when broken.")
      .def(
          "shrink",
          [](CommObj& c, std::vector<int> exclude_ranks, std::optional<double> timeout) {
            CommOptions o;
            o.timeout = to_optional_duration(timeout);
            Result<std::unique_ptr<Communicator>> r = [&] {
              Communicator& cm = c.get();
              nb::gil_scoped_release unlocked;
              return cm.shrink(exclude_ranks, o);
            }();
            return CommObj{take(std::move(r))};
          },
          "exclude_ranks"_a, "timeout"_a = nb::none(),
          "A new communicator of this one's ranks but `exclude_ranks` (the dead, and any the application "
          "wants out), in the spirit of ncclCommShrink (GIL released). Collective over the survivors: "
          "every one calls it with the same list (any order, duplicates ignored); an excluded rank does "
          "not. Works on a broken communicator (after a collective failed because a rank died, see "
          "failed_ranks()) and on a healthy one, which it leaves as it was. Independent of the old "
          "store (works when rank 0 died): the survivors reconnect at the listeners they opened at init. "
          "Ranks are the survivors renumbered 0..m-1 in their old order; a fresh epoch. timeout: seconds "
          "(None: this communicator's timeout), also the new communicator's timeout when set. Errors: "
          "InvalidArgument for a rank outside 0..size-1 or this rank in the list (nothing is sent), or "
          "naming both lists when a survivor passed a different list; PeerFailed when a survivor gave up "
          "or a rank that should survive cannot be reached (exclude it too); Timeout naming the ranks "
          "that never connected. Ends with a barrier over the new communicator. On failure call it again "
          "with the corrected list. Only init's communicators and their splits and shrinks can shrink "
          "(Unsupported otherwise). Not concurrently with this communicator's own operations.",
          nb::keep_alive<0, 1>())
      .def(
          "split",
          [](CommObj& c, int color, int key) -> std::optional<CommObj> {
            Result<std::unique_ptr<Communicator>> r = [&] {
              Communicator& cm = c.get();
              nb::gil_scoped_release unlocked;
              return cm.split(color, key);
            }();
            auto p = take(std::move(r));
            if (!p) return std::nullopt;
            return CommObj{std::move(p)};
          },
          "color"_a, "key"_a = 0,
          "Collective: ranks with the same color form a new communicator ranked by (key, old rank). A "
          "negative color joins none (returns None).",
          nb::keep_alive<0, 1>())
      .def(
          "algorithm",
          [](CommObj& c, const std::string& kind, size_t bytes, std::optional<std::string> algorithm) {
            CollectiveOptions o = coll_options(algorithm, std::nullopt);
            AlgorithmChoice a = c.get().algorithm(take(parse_collective_kind(kind)), bytes, o);
            return std::make_tuple(std::string(a.name), a.steps);
          },
          "kind"_a, "bytes"_a, "algorithm"_a = nb::none(),
          "(name, steps) of the algorithm collective `kind` runs for `bytes`.")
      .def(
          "abort",
          [](CommObj& c) {
            nb::gil_scoped_release unlocked;
            c.get().abort();
          },
          "Breaks the communicator now: outstanding and later operations fail with Aborted; peers see it.")
      .def_prop_ro(
          "failure",
          [](CommObj& c) -> nb::object {
            Status s = c.get().failure();
            if (s.is_ok()) return nb::none();
            return error_object(s);
          },
          "The first failure as a remora.Error instance (not raised), or None.")
      .def(
          "close",
          [](CommObj& c) {
            nb::gil_scoped_release unlocked;
            c.comm.reset();
          },
          "Waits for posted operations (up to the timeout) and leaves the communicator.");
}

/// send, recv and their i-forms (no algorithm, no collective timeout).
void bind_point_to_point(nb::class_<CommObj>& comm) {
  using OS = std::optional<std::string>;

  comm.def(
      "send",
      [](CommObj& c, nb::handle buf, int peer, uint64_t tag, OS dtype) {
        Arg a = arg(buf, false);
        DataType t = type_of(dtype, {&a});
        size_t n = count_of(a, t);
        finish(post([&] { return c.get().isend(a.ptr(), n, t, peer, Tag{tag}); }, holders_of({&a})), true);
      },
      "buf"_a, "peer"_a, "tag"_a = 0, "dtype"_a = nb::none(), "Sends `buf` to rank `peer` (tag < 2**32).");
  comm.def(
      "recv",
      [](CommObj& c, nb::handle buf, int peer, uint64_t tag, OS dtype) {
        Arg a = arg(buf, true);
        DataType t = type_of(dtype, {&a});
        size_t n = count_of(a, t);
        RequestObj r = post([&] { return c.get().irecv(a.ptr(), n, t, peer, Tag{tag}); }, holders_of({&a}));
        wait_request(r, std::numeric_limits<double>::infinity());
        return r.req.bytes();
      },
      "buf"_a, "peer"_a, "tag"_a = 0, "dtype"_a = nb::none(),
      "Receives from rank `peer` into `buf`; returns the bytes that came.");
  comm.def(
      "isend",
      [](CommObj& c, nb::handle buf, int peer, uint64_t tag, OS dtype) {
        Arg a = arg(buf, false);
        DataType t = type_of(dtype, {&a});
        size_t n = count_of(a, t);
        return post([&] { return c.get().isend(a.ptr(), n, t, peer, Tag{tag}); }, holders_of({&a}));
      },
      "buf"_a, "peer"_a, "tag"_a = 0, "dtype"_a = nb::none(), "Posts a send; returns a Request.");
  comm.def(
      "irecv",
      [](CommObj& c, nb::handle buf, int peer, uint64_t tag, OS dtype) {
        Arg a = arg(buf, true);
        DataType t = type_of(dtype, {&a});
        size_t n = count_of(a, t);
        return post([&] { return c.get().irecv(a.ptr(), n, t, peer, Tag{tag}); }, holders_of({&a}));
      },
      "buf"_a, "peer"_a, "tag"_a = 0, "dtype"_a = nb::none(),
      "Posts a receive; Request.bytes says how many bytes came.");
}

/// Each collective: i<name> (Request) and <name> (blocking).
void bind_collective_calls(nb::class_<CommObj>& comm) {
  using OS = std::optional<std::string>;
  using OD = std::optional<double>;

  both(
      comm, "barrier",
      +[](CommObj& c, bool blocking, OS algorithm, OD timeout) {
        auto o = coll_options(algorithm, timeout);
        return finish(post([&] { return c.get().ibarrier(o); }, {}), blocking);
      },
      "Returns (completes) once every rank has called it.", nb::kw_only(), "algorithm"_a = nb::none(),
      "timeout"_a = nb::none());
  both(
      comm, "broadcast",
      +[](CommObj& c, bool blocking, nb::handle buf, int root, OS dtype, OS algorithm, OD timeout) {
        Arg a = arg(buf, true);
        DataType t = type_of(dtype, {&a});
        size_t n = count_of(a, t);
        auto o = coll_options(algorithm, timeout);
        return finish(post([&] { return c.get().ibroadcast(a.ptr(), n, t, root, o); }, holders_of({&a})), blocking);
      },
      "Root's `buf` to every rank's `buf`.", "buf"_a, "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(),
      "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(
      comm, "reduce",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, int root, OS dtype,
          OS algorithm, OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        const bool in_place = r.mem.has_value() && recv.is(send);
        size_t n = count_of(s, t);
        ReduceOp rop = take(parse_reduce_op(op));
        auto o = coll_options(algorithm, timeout);
        return finish(post([&] { return c.get().ireduce(in_place ? kInPlace : s.ptr(), r.ptr(), n, t, rop, root, o); },
                           holders_of({&s, &r})),
                      blocking);
      },
      "op over every rank's `send`, into `recv` at the root (recv may be None elsewhere; pass the same "
      "object as send and recv at the root for in place).",
      "send"_a.none(), "recv"_a.none() = nb::none(), "op"_a = "sum", "root"_a = 0, nb::kw_only(),
      "dtype"_a = nb::none(), "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(
      comm, "allreduce",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, OS dtype, OS algorithm,
          OD timeout) {
        Arg s = arg(send, false);
        const bool in_place = recv.is_none() || recv.is(send);
        Arg r = in_place ? arg(send, true) : arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        size_t n = count_of(r, t);
        ReduceOp rop = take(parse_reduce_op(op));
        auto o = coll_options(algorithm, timeout);
        return finish(post([&] { return c.get().iallreduce(in_place ? kInPlace : s.ptr(), r.ptr(), n, t, rop, o); },
                           holders_of({&s, &r})),
                      blocking);
      },
      "op over every rank's `send`, into every rank's `recv` (None: in place in send); results are "
      "bit-identical on every rank.",
      "send"_a.none(), "recv"_a.none() = nb::none(), "op"_a = "sum", nb::kw_only(), "dtype"_a = nb::none(),
      "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(
      comm, "gather",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, int root, OS dtype, OS algorithm, OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        size_t n = count_of(s, t);
        auto o = coll_options(algorithm, timeout);
        return finish(post([&] { return c.get().igather(s.ptr(), r.ptr(), n, t, root, o); }, holders_of({&s, &r})),
                      blocking);
      },
      "Every rank's `send` (n elements) into the root's `recv`, rank r's at r*n (recv None elsewhere).",
      "send"_a.none(), "recv"_a.none() = nb::none(), "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(),
      "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(
      comm, "gatherv",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, std::vector<size_t> recv_counts,
          std::vector<size_t> displs, int root, OS dtype, OS algorithm, OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        size_t n = count_of(s, t);
        auto o = coll_options(algorithm, timeout);
        Holders h = holders_of({&s, &r});
        auto rc = counts(recv_counts, h), ds = counts(displs, h);
        return finish(post([&] { return c.get().igatherv(s.ptr(), n, r.ptr(), *rc, *ds, t, root, o); }, h), blocking);
      },
      "gather with per-rank counts and displacements (in elements; meaningful at the root).", "send"_a.none(),
      "recv"_a.none(), "recv_counts"_a, "displs"_a, "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(),
      "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(
      comm, "scatter",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, int root, OS dtype, OS algorithm, OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        size_t n = count_of(r, t);
        auto o = coll_options(algorithm, timeout);
        return finish(post([&] { return c.get().iscatter(s.ptr(), r.ptr(), n, t, root, o); }, holders_of({&s, &r})),
                      blocking);
      },
      "The root's `send`, cut into size blocks of len(recv) elements, block r to rank r's `recv` (send None "
      "elsewhere).",
      "send"_a.none(), "recv"_a.none(), "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
      "timeout"_a = nb::none());
  both(
      comm, "scatterv",
      +[](CommObj& c, bool blocking, nb::handle send, std::vector<size_t> send_counts, std::vector<size_t> displs,
          nb::handle recv, int root, OS dtype, OS algorithm, OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        size_t n = count_of(r, t);
        auto o = coll_options(algorithm, timeout);
        Holders h = holders_of({&s, &r});
        auto sc = counts(send_counts, h), ds = counts(displs, h);
        return finish(post([&] { return c.get().iscatterv(s.ptr(), *sc, *ds, r.ptr(), n, t, root, o); }, h), blocking);
      },
      "scatter with per-rank counts and displacements (the root's).", "send"_a.none(), "send_counts"_a, "displs"_a,
      "recv"_a.none(), "root"_a = 0, nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
      "timeout"_a = nb::none());
  both(
      comm, "allgather",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, OS dtype, OS algorithm, OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        size_t n = s.mem ? count_of(s, t) : count_of(r, t) / static_cast<size_t>(c.get().size());
        auto o = coll_options(algorithm, timeout);
        return finish(post([&] { return c.get().iallgather(s.mem ? s.ptr() : kInPlace, r.ptr(), n, t, o); },
                           holders_of({&s, &r})),
                      blocking);
      },
      "Every rank's `send` into every rank's `recv`, rank r's block at r*len(send). send None: in place "
      "(the rank's block is already in recv).",
      "send"_a.none(), "recv"_a.none(), nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
      "timeout"_a = nb::none());
  both(
      comm, "allgatherv",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, std::vector<size_t> recv_counts,
          std::vector<size_t> displs, OS dtype, OS algorithm, OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        size_t n = s.mem ? count_of(s, t) : 0;
        auto o = coll_options(algorithm, timeout);
        Holders h = holders_of({&s, &r});
        auto rc = counts(recv_counts, h), ds = counts(displs, h);
        return finish(
            post([&] { return c.get().iallgatherv(s.mem ? s.ptr() : kInPlace, n, r.ptr(), *rc, *ds, t, o); }, h),
            blocking);
      },
      "allgather with per-rank counts and displacements (send None: in place).", "send"_a.none(), "recv"_a.none(),
      "recv_counts"_a, "displs"_a, nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
      "timeout"_a = nb::none());
  both(
      comm, "reduce_scatter",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, OS dtype, OS algorithm,
          OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        const size_t size = static_cast<size_t>(c.get().size());
        size_t n = s.mem ? count_of(r, t) : count_of(r, t) / size;
        ReduceOp rop = take(parse_reduce_op(op));
        auto o = coll_options(algorithm, timeout);
        return finish(post([&] { return c.get().ireduce_scatter(s.mem ? s.ptr() : kInPlace, r.ptr(), n, t, rop, o); },
                           holders_of({&s, &r})),
                      blocking);
      },
      "op over every rank's `send` (size*len(recv) elements); rank r gets block r in `recv`. send None: in "
      "place (the input is recv, size*n elements; the result is recv's first n).",
      "send"_a.none(), "recv"_a.none(), "op"_a = "sum", nb::kw_only(), "dtype"_a = nb::none(),
      "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(
      comm, "alltoall",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, OS dtype, OS algorithm, OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        size_t n = count_of(s, t) / static_cast<size_t>(c.get().size());
        auto o = coll_options(algorithm, timeout);
        return finish(post([&] { return c.get().ialltoall(s.ptr(), r.ptr(), n, t, o); }, holders_of({&s, &r})),
                      blocking);
      },
      "Block j of this rank's `send` (len(send)/size elements) to rank j's `recv` at block (this rank).",
      "send"_a.none(), "recv"_a.none(), nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
      "timeout"_a = nb::none());
  both(
      comm, "alltoallv",
      +[](CommObj& c, bool blocking, nb::handle send, std::vector<size_t> send_counts, std::vector<size_t> send_displs,
          nb::handle recv, std::vector<size_t> recv_counts, std::vector<size_t> recv_displs, OS dtype, OS algorithm,
          OD timeout) {
        Arg s = arg(send, false), r = arg(recv, true);
        DataType t = type_of(dtype, {&s, &r});
        auto o = coll_options(algorithm, timeout);
        Holders h = holders_of({&s, &r});
        auto sc = counts(send_counts, h), sd = counts(send_displs, h), rc = counts(recv_counts, h),
             rd = counts(recv_displs, h);
        return finish(post([&] { return c.get().ialltoallv(s.ptr(), *sc, *sd, r.ptr(), *rc, *rd, t, o); }, h),
                      blocking);
      },
      "alltoall with per-peer counts and displacements on both sides (in elements).", "send"_a.none(), "send_counts"_a,
      "send_displs"_a, "recv"_a.none(), "recv_counts"_a, "recv_displs"_a, nb::kw_only(), "dtype"_a = nb::none(),
      "algorithm"_a = nb::none(), "timeout"_a = nb::none());
  both(
      comm, "scan",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, OS dtype, OS algorithm,
          OD timeout) { return scan_impl(c, blocking, false, send, recv, op, dtype, algorithm, timeout); },
      "Inclusive prefix reduction: rank r gets op(send_0 .. send_r) (recv None: in place; no avg).", "send"_a.none(),
      "recv"_a.none() = nb::none(), "op"_a = "sum", nb::kw_only(), "dtype"_a = nb::none(), "algorithm"_a = nb::none(),
      "timeout"_a = nb::none());
  both(
      comm, "exscan",
      +[](CommObj& c, bool blocking, nb::handle send, nb::handle recv, const std::string& op, OS dtype, OS algorithm,
          OD timeout) { return scan_impl(c, blocking, true, send, recv, op, dtype, algorithm, timeout); },
      "Exclusive prefix: rank r > 0 gets op(send_0 .. send_{r-1}); rank 0's recv is untouched (recv None: in "
      "place; no avg).",
      "send"_a.none(), "recv"_a.none() = nb::none(), "op"_a = "sum", nb::kw_only(), "dtype"_a = nb::none(),
      "algorithm"_a = nb::none(), "timeout"_a = nb::none());
}

}  // namespace

void bind_collectives(nb::module_& m) {
  nb::class_<CommObj> comm(
      m, "Communicator",
      "A group of ranks running collectives (MPI semantics) and point-to-point messages over a mesh of "
      "endpoints (remora/communicator.h). Every rank must call the same collectives in the same order. "
      "Buffers are arrays or tensors used in place; the element type comes from them (dtype= overrides). "
      "Each collective has a blocking form (returns when this rank's part is done; bounded by the "
      "communicator's timeout) and an i-form returning a Request. A recv/send argument of None means in "
      "place where MPI has MPI_IN_PLACE. Ops: 'sum', 'prod', 'min', 'max', 'avg' (floating types).");
  bind_communicator(comm);
  bind_point_to_point(comm);
  bind_collective_calls(comm);
}

}  // namespace remora::python
