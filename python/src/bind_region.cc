// python/src/bind_region.cc — registered memory in Python: remora.RemoteKey (the
// 40-byte grant a peer uses), remora.Region (Context.register), and remora.Pool with
// the remora.Buffer it hands out.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "binding.h"

namespace remora::python {

namespace {

using namespace nb::literals;

void bind_remote_key(nb::module_& m) {
  nb::class_<RemoteKey>(m, "RemoteKey",
                        "A grant to access a window of a registered region: region id, generation "
                        "(deregistration revokes), the window's bounds, the remote rights granted, and a "
                        "64-bit secret tag over all of those (SipHash keyed with a key that never leaves the "
                        "registering process). Changing any field makes the key invalid. Serialises to exactly "
                        "40 bytes (to_bytes / from_bytes) to hand to a peer any way you like.")
      .def_prop_ro("region", [](const RemoteKey& k) { return static_cast<uint32_t>(k.region); })
      .def_ro("generation", &RemoteKey::generation)
      .def_ro("secret", &RemoteKey::secret)
      .def_ro("offset", &RemoteKey::offset, "start of the granted window within the region")
      .def_ro("length", &RemoteKey::length, "length of the granted window")
      .def_ro("access", &RemoteKey::access)
      .def(
          "to_bytes", [](const RemoteKey& k) { return to_bytes(k.serialize()); },
          "The 40-byte little-endian serialisation (docs/protocol.md).")
      .def_static(
          "from_bytes", [](nb::bytes b) { return take(RemoteKey::deserialize(bytes_of(b))); }, "data"_a,
          "Parses 40 bytes. InvalidArgument for a wrong size, unknown version, unknown access bits, "
          "nonzero reserved bytes or a window whose end overflows. (A key whose secret was tampered "
          "with parses; the target refuses it with InvalidKey.)")
      .def("__eq__", [](const RemoteKey& a, const RemoteKey& b) { return a == b; })
      .def("__hash__", [](const RemoteKey& k) { return nb::hash(to_bytes(k.serialize())); })
      .def("__getstate__", [](const RemoteKey& k) { return to_bytes(k.serialize()); })
      .def("__setstate__",
           [](RemoteKey& k, nb::bytes b) { new (&k) RemoteKey(take(RemoteKey::deserialize(bytes_of(b)))); })
      .def("__repr__", [](const RemoteKey& k) {
        return "RemoteKey(region=" + std::to_string(static_cast<uint32_t>(k.region)) +
               ", generation=" + std::to_string(k.generation) + ", offset=" + std::to_string(k.offset) +
               ", length=" + std::to_string(k.length) + ")";
      });
}

void bind_region_class(nb::module_& m) {
  nb::class_<RegionObj>(m, "Region",
                        "A registered range of memory (Context.register). Keeps the registered object alive; "
                        "deregisters (revoking its keys) on deregister() or when collected.")
      .def(
          "remote_key",
          [](RegionObj& r, std::optional<uint64_t> offset, std::optional<uint64_t> length,
             std::optional<Access> access) {
            if (!r.region.valid()) raise(Status(StatusCode::kInvalidArgument, "the region was deregistered"));
            if (!offset && !length && !access) return r.region.remote_key();
            const uint64_t off = offset.value_or(0);
            const uint64_t len = length ? *length : (off <= r.region.size() ? r.region.size() - off : 0);
            return take(r.region.remote_key(off, len, access.value_or(r.region.access() & kRemoteAccessMask)));
          },
          "offset"_a = nb::none(), "length"_a = nb::none(), "access"_a = nb::none(),
          "A key granting the region's remote rights over the whole region; with arguments, a key for the "
          "window [offset, offset+length) with a subset of the rights. OutOfRange / AccessDenied / "
          "InvalidArgument otherwise.")
      .def(
          "deregister", [](RegionObj& r) { r.region.deregister(); },
          "Deregister now (idempotent). Keys for this region stop validating immediately.")
      .def_prop_ro("id", [](const RegionObj& r) { return static_cast<uint32_t>(r.region.id()); })
      .def_prop_ro("size", [](const RegionObj& r) { return r.region.size(); })
      .def_prop_ro("address", [](const RegionObj& r) { return reinterpret_cast<uintptr_t>(r.region.data()); })
      .def_prop_ro("access", [](const RegionObj& r) { return r.region.access(); })
      .def_prop_ro("pinned", [](const RegionObj& r) { return r.region.pinned(); })
      .def_prop_ro("valid", [](const RegionObj& r) { return r.region.valid(); })
      .def_prop_ro(
          "obj", [](const RegionObj& r) { return r.holder ? r.holder->owner : nb::none(); },
          "The object whose memory is registered.");
}

void bind_buffer(nb::module_& m) {
  nb::class_<BufferObj>(m, "Buffer",
                        "A registered buffer from a Pool. Returns to the pool's free list when released "
                        "(release(), or when collected). Usable wherever memory is expected.")
      .def(
          "view",
          [](nb::handle self) {
            BufferObj& b = nb::cast<BufferObj&>(self);
            if (!b.buf.valid()) raise(Status(StatusCode::kInvalidArgument, "the buffer was released"));
            return byte_array(b.buf.data(), b.buf.size(), self);
          },
          "A NumPy uint8 array over the buffer's bytes (no copy; keeps the buffer alive).")
      .def(
          "remote_key", [](const BufferObj& b) { return b.buf.remote_key(); },
          "A key granting the pool's remote rights over exactly this buffer's bytes.")
      .def(
          "release", [](BufferObj& b) { b.buf.reset(); }, "Returns the buffer to its pool now.")
      .def_prop_ro(
          "size", [](const BufferObj& b) { return b.buf.size(); }, "bytes requested")
      .def_prop_ro(
          "capacity", [](const BufferObj& b) { return b.buf.capacity(); }, "size class")
      .def_prop_ro("region_id", [](const BufferObj& b) { return static_cast<uint32_t>(b.buf.region().id()); })
      .def_prop_ro("region_offset", [](const BufferObj& b) { return b.buf.region_offset(); })
      .def("__len__", [](const BufferObj& b) { return b.buf.size(); });
}

void bind_pool(nb::module_& m) {
  nb::class_<PoolObj>(m, "Pool",
                      "Explicit reuse of registered memory: registers large arenas once and hands out Buffers "
                      "from power-of-two size classes (remora/pool.h).")
      .def(
          "__init__",
          [](PoolObj* self, ContextObj& ctx, size_t arena_bytes, size_t min_buffer_bytes, size_t max_bytes,
             std::optional<Access> access) {
            PoolOptions o;
            o.arena_bytes = arena_bytes;
            o.min_buffer_bytes = min_buffer_bytes;
            o.max_bytes = max_bytes;
            if (access) o.access = *access;
            new (self) PoolObj{std::make_unique<Pool>(ctx.get(), o)};
          },
          "context"_a, "arena_bytes"_a = size_t{64} << 20, "min_buffer_bytes"_a = 4096, "max_bytes"_a = 0,
          "access"_a = nb::none(), nb::keep_alive<1, 2>())
      .def(
          "allocate",
          [](PoolObj& p, size_t bytes) {
            Result<Buffer> b = [&] {
              nb::gil_scoped_release unlocked;
              return p.pool->allocate(bytes);
            }();
            return BufferObj{take(std::move(b))};
          },
          "bytes"_a,
          "A buffer of at least `bytes`. NoResource if max_bytes would be exceeded or registration is "
          "refused.",
          nb::keep_alive<0, 1>())
      .def("stats", [](const PoolObj& p) {
        PoolStats s = p.pool->stats();
        nb::dict d;
        d["registrations"] = s.registrations;
        d["bytes_registered"] = s.bytes_registered;
        d["hits"] = s.hits;
        d["misses"] = s.misses;
        d["buffers_in_use"] = s.buffers_in_use;
        d["bytes_in_use"] = s.bytes_in_use;
        return d;
      });
}

}  // namespace

void bind_region(nb::module_& m) {
  bind_remote_key(m);
  bind_region_class(m);
  bind_buffer(m);
  bind_pool(m);
}

}  // namespace remora::python
