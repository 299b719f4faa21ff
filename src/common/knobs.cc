#include "common/knobs.h"

#include <algorithm>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <toml++/toml.h>

namespace fabkv {
namespace {

// "a, b or c"
std::string either(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += i + 1 == names.size() ? " or " : ", ";
    s += names[i];
  }
  return s;
}

std::string join(const std::vector<std::string>& items, std::string_view sep = ",") {
  std::string s;
  for (const auto& i : items) {
    if (!s.empty()) s += sep;
    s += i;
  }
  return s;
}

uint64_t parse_unsigned(const std::string& s, uint64_t max) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw std::invalid_argument("'" + s + "' is not a number");
  unsigned long long n = 0;
  try {
    n = std::stoull(s);
  } catch (const std::exception&) {
    throw std::invalid_argument("'" + s + "' is too large");
  }
  if (n > max) throw std::invalid_argument(fmt::format("'{}' is larger than {}", s, max));
  return n;
}

int parse_int(const std::string& s) {
  size_t pos = 0;
  int n = 0;
  try {
    n = std::stoi(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (s.empty() || pos != s.size()) throw std::invalid_argument("'" + s + "' is not an integer");
  return n;
}

bool parse_bool(const std::string& s) {
  if (s == "on" || s == "true" || s == "yes" || s == "1") return true;
  if (s == "off" || s == "false" || s == "no" || s == "0") return false;
  throw std::invalid_argument("'" + s + "' is not on or off");
}

// A TOML value as the text a flag would carry; checks the TOML type the knob takes.
std::vector<std::string> items_of(const Knob& k, const toml::node& v) {
  using K = Knob::Kind;
  switch (k.kind()) {
    case K::kNumber:
      if (auto i = v.value_exact<int64_t>()) {
        if (*i < 0) throw std::invalid_argument(fmt::format("{} is negative", *i));
        return {std::to_string(*i)};
      }
      throw std::invalid_argument("expected an integer");
    case K::kBytes:
      if (auto i = v.value_exact<int64_t>()) {
        if (*i < 0) throw std::invalid_argument(fmt::format("{} is negative", *i));
        return {std::to_string(*i)};
      }
      if (auto s = v.value_exact<std::string>()) return {*s};
      throw std::invalid_argument("expected a size (an integer, or a string such as \"64M\")");
    case K::kOnOff:
    case K::kFlag:
      if (auto b = v.value_exact<bool>()) return {*b ? "on" : "off"};
      throw std::invalid_argument("expected true or false");
    case K::kText:
    case K::kChoice:
      if (auto s = v.value_exact<std::string>()) return {*s};
      throw std::invalid_argument("expected a string");
    case K::kTexts:
    case K::kInts: {
      const toml::array* a = v.as_array();
      if (!a)
        throw std::invalid_argument(k.kind() == K::kInts ? "expected an array of integers"
                                                         : "expected an array of strings");
      std::vector<std::string> items;
      for (const toml::node& e : *a) {
        if (k.kind() == K::kInts) {
          auto i = e.value_exact<int64_t>();
          if (!i) throw std::invalid_argument("expected an array of integers");
          items.push_back(std::to_string(*i));
        } else {
          auto s = e.value_exact<std::string>();
          if (!s) throw std::invalid_argument("expected an array of strings");
          items.push_back(*s);
        }
      }
      return items;
    }
  }
  throw std::logic_error("knob kind");
}

}  // namespace

size_t parse_bytes(const std::string& s) {
  if (s.empty()) throw std::invalid_argument("empty size");
  if (s[0] < '0' || s[0] > '9') throw std::invalid_argument("not a size: '" + s + "'");
  size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(s, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument("not a size: '" + s + "'");
  }
  std::string unit = s.substr(pos);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && (unit[1] == 'i' || unit[1] == 'I')) unit.pop_back();
  int shift = 0;
  if (unit.empty()) shift = 0;
  else if (unit == "K" || unit == "k") shift = 10;
  else if (unit == "M" || unit == "m") shift = 20;
  else if (unit == "G" || unit == "g") shift = 30;
  else if (unit == "T" || unit == "t") shift = 40;
  else throw std::invalid_argument("unknown size unit in '" + s + "' (use K, M, G or T)");
  if (n > (~0ULL >> shift)) throw std::invalid_argument("size too large: '" + s + "'");
  return static_cast<size_t>(n << shift);
}

std::string format_bytes(uint64_t n) {
  static const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (n != 0 && n % 1024 == 0 && u < 4) {
    n /= 1024;
    ++u;
  }
  return std::to_string(n) + units[u];
}

// ---- Knob ----

Knob& Knob::range(uint64_t min, uint64_t max) {
  min_ = min;
  max_ = max;
  return *this;
}

Knob& Knob::multiple_of(uint64_t m) {
  multiple_ = m ? m : 1;
  return *this;
}

Knob& Knob::one_of(std::vector<std::string> allowed) {
  allowed_ = std::move(allowed);
  return *this;
}

Knob& Knob::formerly(std::string old_key) {
  old_key_ = std::move(old_key);
  return *this;
}

std::string Knob::toml_name() const { return table_.empty() ? key_ : "[" + table_ + "] " + key_; }

std::string Knob::text() const { return text_(); }

std::string Knob::value_hint() const {
  switch (kind_) {
    case Kind::kNumber: return "N";
    case Kind::kBytes: return "SIZE";
    case Kind::kOnOff: return "on|off";
    case Kind::kFlag: return "";
    case Kind::kText: return allowed_.empty() ? "TEXT" : join(allowed_, "|");
    case Kind::kChoice: return join(allowed_, "|");
    case Kind::kTexts: return "LIST";
    case Kind::kInts: return "LIST";
  }
  return "";
}

void Knob::set(const std::vector<std::string>& items) {
  const bool list = kind_ == Kind::kTexts || kind_ == Kind::kInts;
  if (!list && items.size() != 1) throw std::invalid_argument("expected one value");
  set_(items);
}

void Knob::check() const {
  const std::string& name = flag_.empty() ? toml_name() : flag_;
  if (kind_ == Kind::kNumber || kind_ == Kind::kBytes) {
    const uint64_t v = number_();
    auto show = [&](uint64_t n) {
      return kind_ == Kind::kBytes ? format_bytes(n) : std::to_string(n);
    };
    if (v < min_ || v > max_ || v % multiple_ != 0) {
      if (multiple_ > 1)
        throw std::invalid_argument(fmt::format("{} must be a multiple of {} in {}..{}", name,
                                                multiple_, show(min_), show(max_)));
      if (max_ == UINT64_MAX)
        throw std::invalid_argument(fmt::format("{} must be at least {}", name, show(min_)));
      throw std::invalid_argument(fmt::format("{} must be {}..{}", name, show(min_), show(max_)));
    }
  }
  if (kind_ == Kind::kText && !allowed_.empty()) {
    const std::string v = text_();
    if (std::find(allowed_.begin(), allowed_.end(), v) == allowed_.end())
      throw std::invalid_argument(fmt::format("{} must be {}, not '{}'", name, either(allowed_),
                                              v));
  }
}

bool Knob::given() const { return option_ != nullptr && option_->count() > 0; }

// ---- Knobs::Section ----

Knob& Knobs::Section::add(Knob::Kind kind, std::string key, std::string flag, std::string help) {
  auto k = std::unique_ptr<Knob>(new Knob());
  k->kind_ = kind;
  k->table_ = table_;
  k->group_ = group_;
  k->key_ = std::move(key);
  k->flag_ = std::move(flag);
  k->help_ = std::move(help);
  knobs_->knobs_.push_back(std::move(k));
  return *knobs_->knobs_.back();
}

Knob& Knobs::Section::number(std::string key, std::string flag, uint32_t* var, std::string help) {
  Knob& k = add(Knob::Kind::kNumber, std::move(key), std::move(flag), std::move(help));
  k.set_ = [var](const std::vector<std::string>& v) {
    *var = static_cast<uint32_t>(parse_unsigned(v.at(0), UINT32_MAX));
  };
  k.text_ = [var] { return std::to_string(*var); };
  k.number_ = [var] { return uint64_t{*var}; };
  return k;
}

Knob& Knobs::Section::bytes(std::string key, std::string flag, size_t* var, std::string help) {
  Knob& k = add(Knob::Kind::kBytes, std::move(key), std::move(flag), std::move(help));
  k.set_ = [var](const std::vector<std::string>& v) { *var = parse_bytes(v.at(0)); };
  k.text_ = [var] { return format_bytes(*var); };
  k.number_ = [var] { return uint64_t{*var}; };
  return k;
}

Knob& Knobs::Section::on_off(std::string key, std::string flag, bool* var, std::string help) {
  Knob& k = add(Knob::Kind::kOnOff, std::move(key), std::move(flag), std::move(help));
  k.set_ = [var](const std::vector<std::string>& v) { *var = parse_bool(v.at(0)); };
  k.text_ = [var] { return std::string(*var ? "on" : "off"); };
  return k;
}

Knob& Knobs::Section::flag(std::string key, std::string flag, bool* var, std::string help) {
  Knob& k = add(Knob::Kind::kFlag, std::move(key), std::move(flag), std::move(help));
  k.set_ = [var](const std::vector<std::string>& v) { *var = parse_bool(v.at(0)); };
  k.text_ = [var] { return std::string(*var ? "on" : "off"); };
  return k;
}

Knob& Knobs::Section::text(std::string key, std::string flag, std::string* var, std::string help) {
  Knob& k = add(Knob::Kind::kText, std::move(key), std::move(flag), std::move(help));
  Knob* self = &k;
  k.set_ = [var, self](const std::vector<std::string>& v) {
    const auto& allowed = self->allowed_;
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), v.at(0)) == allowed.end())
      throw std::invalid_argument(fmt::format("'{}' is not {}", v.at(0), either(allowed)));
    *var = v.at(0);
  };
  k.text_ = [var] { return *var; };
  return k;
}

Knob& Knobs::Section::list(std::string key, std::string flag, std::vector<std::string>* var,
                           std::string help) {
  Knob& k = add(Knob::Kind::kTexts, std::move(key), std::move(flag), std::move(help));
  k.set_ = [var](const std::vector<std::string>& v) { *var = v; };
  k.text_ = [var] { return join(*var); };
  return k;
}

Knob& Knobs::Section::list(std::string key, std::string flag, std::vector<int>* var,
                           std::string help) {
  Knob& k = add(Knob::Kind::kInts, std::move(key), std::move(flag), std::move(help));
  k.set_ = [var](const std::vector<std::string>& v) {
    std::vector<int> out;
    for (const auto& s : v) out.push_back(parse_int(s));
    *var = std::move(out);
  };
  k.text_ = [var] {
    std::vector<std::string> s;
    for (int i : *var) s.push_back(std::to_string(i));
    return join(s);
  };
  return k;
}

// ---- Knobs ----

void Knobs::add_to(CLI::App& app) {
  for (auto& kp : knobs_) {
    Knob& k = *kp;
    if (k.flag_.empty()) continue;
    CLI::Option* opt = nullptr;
    switch (k.kind_) {
      case Knob::Kind::kFlag: opt = app.add_flag(k.flag_, k.flag_on_, k.help_); break;
      case Knob::Kind::kTexts:
      case Knob::Kind::kInts:
        opt = app.add_option(k.flag_, k.flag_items_, k.help_)->delimiter(',');
        break;
      default: opt = app.add_option(k.flag_, k.flag_text_, k.help_); break;
    }
    const std::string hint = k.value_hint();
    if (!hint.empty()) opt->type_name(hint);
    if (k.kind_ != Knob::Kind::kFlag) {
      const std::string now = k.text();
      if (!now.empty()) opt->default_str(now);
    }
    opt->group(k.group_.empty() ? "Options" : k.group_);
    k.option_ = opt;
  }
}

void Knobs::apply_flags() {
  for (auto& kp : knobs_) {
    Knob& k = *kp;
    if (!k.given()) continue;
    try {
      switch (k.kind_) {
        case Knob::Kind::kFlag: k.set({k.flag_on_ ? "on" : "off"}); break;
        case Knob::Kind::kTexts:
        case Knob::Kind::kInts: k.set(k.flag_items_); break;
        default: k.set({k.flag_text_}); break;
      }
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", k.flag_, e.what()));
    }
    k.check();
  }
}

void Knobs::check() const {
  for (const auto& k : knobs_) k->check();
}

const Knob* Knobs::find_flag(const std::string& flag) const {
  for (const auto& k : knobs_)
    if (k->flag_ == flag) return k.get();
  return nullptr;
}

void Knobs::load_toml(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(fmt::format("{}:{}: {}", path, e.source().begin.line,
                                         e.description()));
  }
  auto at = [&](const toml::key& key, const toml::node& v) {
    const auto line = key.source().begin.line ? key.source().begin.line : v.source().begin.line;
    return fmt::format("{}:{}", path, line);
  };
  std::vector<std::string> tables, top;
  for (const auto& k : knobs_) {
    auto& names = k->table_.empty() ? top : tables;
    const std::string& n = k->table_.empty() ? k->key_ : k->table_;
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  auto find = [&](const std::string& table, std::string_view key) -> Knob* {
    for (const auto& k : knobs_)
      if (k->table_ == table && k->key_ == key) return k.get();
    return nullptr;
  };
  auto keys_of = [&](const std::string& table) {
    std::vector<std::string> keys;
    for (const auto& k : knobs_)
      if (k->table_ == table) keys.push_back(k->key_);
    return keys;
  };
  auto load = [&](Knob& k, const toml::key& key, const toml::node& v) {
    try {
      k.set(items_of(k, v));
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(fmt::format("{}: {}: {}", at(key, v), k.toml_name(), e.what()));
    }
    try {
      k.check();
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(fmt::format("{}: {} ({})", at(key, v), e.what(), k.toml_name()));
    }
  };

  for (auto&& [key, v] : t) {
    const std::string name(key.str());
    if (std::find(tables.begin(), tables.end(), name) != tables.end()) {
      const toml::table* sub = v.as_table();
      if (!sub)
        throw std::runtime_error(
            fmt::format("{}: {} is a table: write [{}] and its settings ({}) "
                        "below it",
                        at(key, v), name, name, join(keys_of(name), ", ")));
      for (auto&& [key2, v2] : *sub) {
        Knob* k = find(name, key2.str());
        if (!k)
          throw std::runtime_error(fmt::format("{}: unknown setting '{}' in [{}] (known: {})",
                                               at(key2, v2), key2.str(), name,
                                               join(keys_of(name), ", ")));
        load(*k, key2, v2);
      }
      continue;
    }
    if (Knob* k = find("", name)) {
      load(*k, key, v);
      continue;
    }
    // A key that used to be at the top level and now lives in a table.
    for (const auto& k : knobs_)
      if (!k->table_.empty() && (k->key_ == name || k->old_key_ == name))
        throw std::runtime_error(fmt::format("{}: {} moved to [{}]{}: write it under a [{}] table",
                                             at(key, v), name, k->table_,
                                             k->key_ == name ? "" : " as " + k->key_, k->table_));
    std::string known = join(top, ", ");
    if (!tables.empty()) {
      std::vector<std::string> bracketed;
      for (const auto& tb : tables) bracketed.push_back("[" + tb + "]");
      known += "; tables " + join(bracketed, ", ");
    }
    throw std::runtime_error(fmt::format("{}: unknown setting '{}' (known: {})", at(key, v), name,
                                         known));
  }
}

}  // namespace fabkv
