// libFuzzer target for the control channel parsers (docs/control-channel.md, "Fuzzing").
// Every input goes to parse_header, parse_hello, parse_welcome, parse_challenge, parse_proof
// and parse_error; whatever parses must re-encode to exactly the input (encodings are
// canonical) and parse again to the same value. Any crash, sanitizer report or abort() below
// is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "control/wire.h"

using namespace fabkv::control;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fabkv-fuzz-control: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  std::vector<uint8_t> bytes(data, data + size);

  HeaderParse hp = parse_header(in);
  if (hp.status == Status::kOk && hp.header.body_length > kMaxFrameSize) fail("header limit");

  HelloParse h = parse_hello(in);
  if (h.status == Status::kOk) {
    if (!h.error.empty()) fail("hello: ok with an error text");
    if (!check_limits(h.hello).empty()) fail("hello: parsed a hello over the limits");
    if (encode(h.hello) != bytes) fail("hello: re-encoding differs from the input");
    HelloParse again = parse_hello(encode(h.hello));
    if (again.status != Status::kOk || !(again.hello == h.hello)) fail("hello: round trip");
  } else if (h.error.empty()) {
    fail("hello: rejected without a reason");
  }

  WelcomeParse w = parse_welcome(in);
  if (w.status == Status::kOk) {
    if (!check_limits(w.welcome).empty()) fail("welcome: parsed a welcome over the limits");
    if (encode(w.welcome) != bytes) fail("welcome: re-encoding differs from the input");
    WelcomeParse again = parse_welcome(encode(w.welcome));
    if (again.status != Status::kOk || !(again.welcome == w.welcome)) fail("welcome: round trip");
  } else if (w.error.empty()) {
    fail("welcome: rejected without a reason");
  }

  ChallengeParse c = parse_challenge(in);
  if (c.status == Status::kOk) {
    if (!c.error.empty()) fail("challenge: ok with an error text");
    if (!check_limits(c.challenge).empty()) fail("challenge: parsed one over the limits");
    if (encode(c.challenge) != bytes) fail("challenge: re-encoding differs from the input");
    ChallengeParse again = parse_challenge(encode(c.challenge));
    if (again.status != Status::kOk || !(again.challenge == c.challenge))
      fail("challenge: round trip");
  } else if (c.error.empty()) {
    fail("challenge: rejected without a reason");
  }

  ProofParse p = parse_proof(in);
  if (p.status == Status::kOk) {
    if (!p.error.empty()) fail("proof: ok with an error text");
    if (!check_limits(p.proof).empty()) fail("proof: parsed one over the limits");
    if (encode(p.proof) != bytes) fail("proof: re-encoding differs from the input");
    ProofParse again = parse_proof(encode(p.proof));
    if (again.status != Status::kOk || !(again.proof == p.proof)) fail("proof: round trip");
  } else if (p.error.empty()) {
    fail("proof: rejected without a reason");
  }

  ErrorParse e = parse_error(in);
  if (e.status == Status::kOk) {
    if (encode_error(e.reported, e.message) != bytes) fail("error: re-encoding differs");
  } else if (e.error.empty()) {
    fail("error: rejected without a reason");
  }
  return 0;
}
