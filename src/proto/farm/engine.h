// `farm` engine: FaRM-KV's hopscotch table (HERD sec. 5.1.2, survey sec. 3.4), laid out byte
// for byte as proto/farm/layout.h says, so that clients GET by one READ of a key's H = 6
// buckets while the owner thread writes. Lossless like `store` and `pilaf`: a PUT that cannot
// fit grows the table and/or the extents into a new generation (up to the memory cap), else
// returns kNoSpace and changes nothing. It implements the generic Engine interface, so the
// RPC protocols (herd, server-reply) serve the same keys. Design: docs/farm.md.
//
// Memory: per generation two anonymous mappings, as pilaf's engine (proto/pilaf/engine.h):
// the table (TableHeader + buckets) and the extents (records of items that do not fit a
// bucket, TLSF heap of store/heap.h). A growth builds a complete new generation, announces it
// (hooks.on_live), sets the old header retired and overwrites every old bucket with a sealed
// retired marker; the old generation stays mapped for retire_grace_ms.
//
// Write order (all steps separated by release fences; every mutation ends with one):
//   PUT inline (new or update): the sealed bucket, built locally, is copied into its bucket;
//     an update of an indirect item then frees the old record.
//   PUT indirect: the record into free extent space first, then the bucket, then (update) the
//     old record is freed.
//   DELETE: zero the bucket, then free the record.
//   Hopscotch displacement (Herlihy et al.'s insertion, as FaRM-KV uses it): the whole chain is
//     computed first from the server's private home array; moves goes odd; from the free
//     bucket backwards each key is copied into the free bucket nearer its home's end (it is in
//     two buckets until the next step overwrites the old one), then the new key lands; moves
//     goes even. A key is in one or two buckets of its neighbourhood at every instant.
//
// Threads: one owner thread for everything except stats(), farm_stats(), memory_bytes().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/farm/layout.h"
#include "proto/read_table/engine.h"
#include "proto/registry.h"
#include "store/engine.h"
#include "store/heap.h"
#include "store/region.h"

namespace fabkv::farm {

struct EngineConfig {
  // Bytes of key + value a bucket holds inline (rounded up to 8, at least
  // farm::kPointerBytes); larger items go to an extent record.
  size_t inline_bytes = 48;
  // farm-var (HERD sec. 5.1.2, FaRM-em-VAR): buckets of a pointer only (inline_bytes is then
  // farm::kPointerBytes) and every item in an extent record.
  bool pointers_only = false;
  // Home buckets of the first generation (at least 16).
  size_t initial_homes = 65536;
  // Extent bytes of the first generation (rounded up to a page and one maximum-size record).
  size_t initial_extent_bytes = size_t{4} << 20;
  // Cap on table + extent bytes of the live generation; 0 = store::EngineOptions::memory_bytes.
  size_t memory_bytes = 0;
  // How long a replaced generation stays mapped (clients mid-READ).
  uint32_t retire_grace_ms = 5000;
  // Hopscotch's add range: buckets searched from the home for a free one before the table
  // grows.
  uint32_t probe_range = 256;
};

struct Generation {
  uint32_t generation = 0;
  std::byte* table = nullptr;
  size_t table_bytes = 0;
  uint64_t homes = 0;
  size_t bucket_bytes = 0;
  std::byte* extents = nullptr;
  size_t extent_bytes = 0;
  bool huge_pages = false;
};

// What the server is told of generations (read_table/generations.h).
using Hooks = read_table::Hooks<Generation>;

// The client's lookup rules (layout.h) run on local memory: for tests and tools.
struct Lookup {
  bool found = false;
  bool retired = false;
  uint32_t reads = 0;  // neighbourhood reads, retries included
  uint64_t version = 0;
  uint32_t expire_at = 0;
  std::string value;
};

// One generation's memory (engine.cc).
struct Gen;

class Engine final : public read_table::Engine<Engine, Gen, Generation> {
 public:
  explicit Engine(const store::EngineOptions& opts, const EngineConfig& fopts = {});
  ~Engine() override;

  std::string_view name() const override { return "farm"; }
  store::EngineMemory memory() const override;

  size_t inline_bytes() const { return inline_; }
  bool pointers_only() const { return pointers_only_; }

  struct FarmStats {
    uint64_t growths = 0;
    uint64_t displacements = 0;  // chains applied on the live table (moves += 2 each)
    uint64_t moved_keys = 0;
    uint64_t used_buckets = 0;
    uint64_t indirect_items = 0;  // items in extent records
    uint64_t retired_live = 0;
  };
  FarmStats farm_stats() const;  // any thread

  // The client's rules over a generation's memory (no fabric). Any thread that may read it.
  static Lookup lookup(const Generation& g, std::string_view key);

 private:
  using Base = read_table::Engine<Engine, Gen, Generation>;
  friend Base;

  // The item rules' table operations (read_table/engine.h).
  Found find(const Gen& g, std::string_view key) const;
  Item item_at(const Gen& g, uint64_t b) const;
  std::string_view value_at(const Gen& g, uint64_t b) const;
  void erase(Gen& g, uint64_t b);
  std::optional<uint64_t> place(std::string_view key, std::string_view value,
                                const store::PutOptions& opts, Found f);
  void publish_sizes();
  size_t table_size(uint64_t homes) const { return farm::table_bytes(homes, bucket_bytes_); }
  std::unique_ptr<Gen> build(uint64_t homes, size_t extent_bytes);
  void retire(Gen& prev) const;
  std::unique_ptr<Gen> map_gen(uint64_t homes, size_t extent_bytes, uint32_t generation) const;
  bool describes(const Gen& g, const TableHeader& h) const;
  // Buckets, records, neighbourhoods and the indirect count.
  std::string check_items(const Gen& g, uint64_t& n) const;

  // The buckets a new key with home `home` goes through: chain[0] the free bucket found, each
  // next one a bucket whose key moves into the previous; the last is where the key lands
  // (within [home, home + H)). Empty = none within probe_range / no displacement possible.
  std::vector<uint64_t> find_chain(const Gen& g, uint64_t home) const;
  void apply_chain(Gen& g, const std::vector<uint64_t>& chain, const std::byte* bucket,
                   uint64_t home, bool live);
  bool insert(Gen& g, const std::byte* bucket, uint64_t home, bool live);
  store::Status grow(bool more_homes, bool more_extents, size_t record);

  std::vector<std::byte> scratch_;  // one bucket, built before it is copied into place
  bool pointers_only_ = false;
  size_t inline_ = 48, bucket_bytes_ = 80;
  uint32_t probe_range_ = 256;
  std::atomic<uint64_t> used_buckets_{0}, indirect_items_{0};
};

}  // namespace fabkv::farm

// Instantiated in engine.cc, where Gen is complete.
extern template class fabkv::read_table::Engine<fabkv::farm::Engine, fabkv::farm::Gen,
                                                fabkv::farm::Generation>;

namespace fabkv::farm {

// The engine the registry builds for --engine farm (proto/engines.cc), from the [farm] knobs
// (proto/farm/options.h); farm-var's buckets hold pointers only.
std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec);
// Do clients change items without the worker (proto/registry.h, clients_write_engine)?
bool clients_write_items();

}  // namespace fabkv::farm
