// Knobs: each setting of a program declared once (its TOML table and key, its flag, help text,
// help group, the variable it fills and its range); from that one declaration the program gets
// the CLI11 options, the TOML reader (unknown keys refused with file:line and the known ones),
// "flags override the file", and the range checks with user-facing messages.
//
//   Knobs k;
//   auto rpc = k.section("rpc", "RPC (herd, server-reply, pilaf messages)");
//   rpc.number("window", "--window", &o.window, "W: outstanding requests per client").range(1, 64);
//   k.add_to(app);            // CLI11 options, in their groups
//   app.parse(argc, argv);    // flags are only captured here
//   k.load_toml(path);        // the file fills the variables...
//   k.apply_flags();          // ...then every flag given on the command line wins
//   k.check();                // ranges
//
// Section "" is the file's top level. The variables must outlive the Knobs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace fabkv {

// Parses "64M", "1G", "4096" (K/M/G/T = powers of 1024; a trailing B or iB is allowed).
// Throws std::invalid_argument.
size_t parse_bytes(const std::string& s);
// 65536 -> "64K", 8388608 -> "8M", 1000 -> "1000": the shortest exact spelling.
std::string format_bytes(uint64_t n);

class Knob {
 public:
  enum class Kind : uint8_t {
    kNumber,  // uint32_t: TOML integer, flag N
    kBytes,   // size_t: TOML integer or "64M", flag 64M
    kOnOff,   // bool: TOML boolean, flag on|off
    kFlag,    // bool: TOML boolean, flag without a value (given = on)
    kText,    // std::string (optionally one of a list)
    kChoice,  // an enum, by the names of its values: TOML string, flag name
    kTexts,   // std::vector<std::string>: TOML array of strings, flag a,b,c
    kInts,    // std::vector<int>: TOML array of integers, flag 1,2,3
  };

  // Range of a kNumber or kBytes knob; max = none when only a minimum applies.
  Knob& range(uint64_t min, uint64_t max = UINT64_MAX);
  // kNumber/kBytes: the value must also be a multiple of m.
  Knob& multiple_of(uint64_t m);
  // kText: the value must be one of these (checked when set and by check()).
  Knob& one_of(std::vector<std::string> allowed);
  // The top-level key this knob had before it moved into its table (the key itself is
  // recognised anyway): a file that still has it is refused with where it went.
  Knob& formerly(std::string old_key);

  const std::string& table() const { return table_; }
  const std::string& key() const { return key_; }
  const std::string& flag() const { return flag_; }
  const std::string& help() const { return help_; }
  const std::string& group() const { return group_; }
  const std::string& old_key() const { return old_key_; }
  Kind kind() const { return kind_; }
  // "[rpc] window" or "workers" (top level): how a message names it in a file.
  std::string toml_name() const;
  // The current value as a flag would spell it ("64K", "on", "herd,pilaf"); "" when empty.
  std::string text() const;
  // What the values look like: "N", "SIZE", "on|off", "write|send", "LIST", ...
  std::string value_hint() const;
  // Sets the variable from flag text (a list knob: its items). Throws std::invalid_argument
  // with a message that does not name the knob (the caller says where the value came from).
  void set(const std::vector<std::string>& items);
  // The knob's own range/choice check; throws std::invalid_argument("--window must be 1..64").
  void check() const;
  // True when the knob's flag was on the command line (after CLI11 parsed it).
  bool given() const;

 private:
  friend class Knobs;
  Knob() = default;

  Kind kind_ = Kind::kText;
  std::string table_, key_, flag_, help_, group_, old_key_;
  uint64_t min_ = 0, max_ = UINT64_MAX, multiple_ = 1;
  std::vector<std::string> allowed_;  // kText one_of, kChoice names
  std::function<void(const std::vector<std::string>&)> set_;
  std::function<std::string()> text_;
  std::function<uint64_t()> number_;  // kNumber/kBytes: the current value
  // What CLI11 captured.
  CLI::Option* option_ = nullptr;
  std::string flag_text_;
  std::vector<std::string> flag_items_;
  bool flag_on_ = false;
};

class Knobs {
 public:
  // Declares knobs of one TOML table ("" = top level) under one --help group.
  class Section {
   public:
    Knob& number(std::string key, std::string flag, uint32_t* var, std::string help);
    Knob& bytes(std::string key, std::string flag, size_t* var, std::string help);
    Knob& on_off(std::string key, std::string flag, bool* var, std::string help);
    Knob& flag(std::string key, std::string flag, bool* var, std::string help);
    Knob& text(std::string key, std::string flag, std::string* var, std::string help);
    Knob& list(std::string key, std::string flag, std::vector<std::string>* var, std::string help);
    Knob& list(std::string key, std::string flag, std::vector<int>* var, std::string help);
    // An enum chosen by name: choice("transport", "--transport", &t, {{"write", kWrite}, ...}).
    template <typename E>
    Knob& choice(std::string key, std::string flag, E* var,
                 std::vector<std::pair<std::string, E>> choices, std::string help);

   private:
    friend class Knobs;
    Section(Knobs* k, std::string table, std::string group)
        : knobs_(k), table_(std::move(table)), group_(std::move(group)) {}
    Knob& add(Knob::Kind kind, std::string key, std::string flag, std::string help);
    Knobs* knobs_;
    std::string table_, group_;
  };

  Knobs() = default;
  Knobs(const Knobs&) = delete;
  Knobs& operator=(const Knobs&) = delete;

  Section section(std::string table, std::string group) {
    return Section(this, std::move(table), std::move(group));
  }

  // Adds every knob's flag to `app` (with its group, and its current value as the default).
  void add_to(CLI::App& app);
  // Reads a TOML file into the variables. Throws std::runtime_error("path:line: ...") for a
  // syntax error, an unknown table or key (listing the known ones), a key that moved into a
  // table, a value of the wrong type or out of range.
  void load_toml(const std::string& path);
  // Sets every knob whose flag was given from the text CLI11 captured, then checks it.
  // Throws std::invalid_argument("--window: ...").
  void apply_flags();
  // Every knob's range and choices; throws std::invalid_argument with the first failure.
  void check() const;

  const std::vector<std::unique_ptr<Knob>>& all() const { return knobs_; }
  // nullptr when no knob has this flag.
  const Knob* find_flag(const std::string& flag) const;

 private:
  std::vector<std::unique_ptr<Knob>> knobs_;
};

template <typename E>
Knob& Knobs::Section::choice(std::string key, std::string flag, E* var,
                             std::vector<std::pair<std::string, E>> choices, std::string help) {
  Knob& k = add(Knob::Kind::kChoice, std::move(key), std::move(flag), std::move(help));
  for (const auto& c : choices) k.allowed_.push_back(c.first);
  k.set_ = [var, choices](const std::vector<std::string>& items) {
    for (const auto& c : choices)
      if (items.at(0) == c.first) {
        *var = c.second;
        return;
      }
    std::string names;
    for (const auto& c : choices) names += (names.empty() ? "" : ", ") + c.first;
    throw std::invalid_argument("'" + items.at(0) + "' is not one of " + names);
  };
  k.text_ = [var, choices]() -> std::string {
    for (const auto& c : choices)
      if (*var == c.second) return c.first;
    return "?";
  };
  return k;
}

}  // namespace fabkv
