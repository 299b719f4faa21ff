// Where clients READ a worker's table (read_table/generations.h): every generation's table and
// extents registered read-only with the NIC, the new one before the old one is marked retired
// (Pilaf sec. 3.3), each deregistered when its generation is released; and the live one's
// remote regions, for the Welcome and for the layout a client asks for when its READ met a
// retired table. Used by pilaf's and farm's server sides.
//
// Threads: hooks() run on the worker's thread (the engine's owner); live() and add_regions()
// on any thread (the control thread: admit, control requests, stats).
#pragma once

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "control/wire.h"
#include "fabric/memory_region.h"
#include "proto/read_table/generations.h"

namespace fabkv::read_table {

// Info is a generation as its engine describes it: generation, table, table_bytes, extents,
// extent_bytes, and whatever else clients need to know of its layout.
template <class Info>
class Registrations {
 public:
  struct Live {
    Info info;
    fabric::RemoteRegion table, extents;
  };

  explicit Registrations(fabric::Fabric& fabric) : fabric_(fabric) {}
  // Deregisters every generation; the engine, which unmaps them, must outlive this.
  ~Registrations() = default;

  // The engine's hooks: register a generation that goes live, deregister a released one.
  Hooks<Info> hooks() {
    Hooks<Info> h;
    h.on_live = [this](const Info& g) { add(g); };
    h.on_release = [this](const Info& g) {
      std::erase_if(mrs_, [&](const Mrs& m) { return m.generation == g.generation; });
    };
    return h;
  }

  Live live() const {
    std::lock_guard lock(mu_);
    return live_;
  }

  // Adds "<name>.table.<worker>" and "<name>.extents.<worker>" of the live generation to a
  // Welcome's regions.
  void add_regions(std::string_view name, uint32_t worker,
                   std::vector<control::RegionDescriptor>* out) const {
    const Live l = live();
    for (const auto& [part, r] : {std::pair{"table", l.table}, std::pair{"extents", l.extents}})
      out->push_back({fmt::format("{}.{}.{}", name, part, worker), r.addr, r.length, r.key,
                      static_cast<uint32_t>(r.access)});
  }

 private:
  struct Mrs {
    uint32_t generation;
    std::unique_ptr<fabric::MemoryRegion> table, extents;
  };

  void add(const Info& g) {
    Mrs m;
    m.generation = g.generation;
    m.table = std::make_unique<fabric::MemoryRegion>(fabric_, g.table, g.table_bytes,
                                                     fabric::Access::kRemoteRead);
    m.extents = std::make_unique<fabric::MemoryRegion>(fabric_, g.extents, g.extent_bytes,
                                                       fabric::Access::kRemoteRead);
    Live l{g, m.table->remote(), m.extents->remote()};
    mrs_.push_back(std::move(m));
    std::lock_guard lock(mu_);
    live_ = l;
  }

  fabric::Fabric& fabric_;
  std::vector<Mrs> mrs_;   // every generation still mapped (the live one last)
  mutable std::mutex mu_;  // live_ (the control thread reads it)
  Live live_{};
};

}  // namespace fabkv::read_table
