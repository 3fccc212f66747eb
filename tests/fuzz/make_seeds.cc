// fuzz_make_seeds DIR: writes the generated seeds of fuzz_decode_message,
// fuzz_compression_decode and fuzz_checkpoint_file under DIR/<target>/gen-*: messages,
// payloads and checkpoint files built with the real encoders (so the fuzzer starts from
// inputs that pass every check) and near-misses of each check (wrong protocol version,
// wrong job, a frame longer than declared, a frame missing, one too many, a bad top-k
// payload, a truncated or bit-flipped checkpoint).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "fuzz_check.h"
#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/message.h"

using namespace groupsgd;
namespace fs = std::filesystem;

namespace {

fs::path g_dir;

void write(const std::string& target, const std::string& name,
           const std::vector<std::uint8_t>& bytes) {
  const fs::path dir = g_dir / target;
  fs::create_directories(dir);
  std::ofstream out(dir / ("gen-" + name), std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::vector<std::uint8_t>> framesOf(OutMessage m) {
  std::vector<std::vector<std::uint8_t>> out;
  for (auto& f : std::move(m).toFrames()) {
    const auto* p = static_cast<const std::uint8_t*>(f.data());
    out.emplace_back(p, p + f.size());
  }
  return out;
}

std::vector<std::uint8_t> join(const std::vector<std::vector<std::uint8_t>>& frames) {
  std::vector<std::uint8_t> out;
  for (const auto& f : frames) fuzz::appendFrame(&out, f.data(), f.size());
  return out;
}

void message(const std::string& name, OutMessage m) {
  write("fuzz_decode_message", name, join(framesOf(std::move(m))));
}

OutMessage push(std::uint64_t step) {
  OutMessage m(1, 3);
  m.header().setEpoch(2);
  m.header().setStep(step);
  auto p = m.header().getBody().initPush();
  p.setBatchSize(32);
  p.setLoss(0.5f);
  return m;
}

Payload ramp(std::size_t n) {
  auto v = std::make_shared<std::vector<float>>(n);
  for (std::size_t i = 0; i < n; ++i) (*v)[i] = 0.25f * static_cast<float>(i) - 1.0f;
  return v;
}

OutMessage encodedPush(kernels::Encoding e, std::size_t n, float ratio, std::uint32_t chunk) {
  kernels::Compressor c(e, n, ratio);
  auto bytes = std::make_shared<std::vector<std::uint8_t>>();
  c.encode(*ramp(n), bytes.get());
  OutMessage m = push(4);
  m.addEncodedTensor(bytes, toWire(e), n, chunk);
  return m;
}

void messages() {
  {
    // Parts of a gradient sent in parts (protocol 2): the first, a middle and the last.
    OutMessage m = push(5);
    m.addTensor(ramp(1000));
    auto parts = std::move(m).toParts(1024);
    for (std::size_t i : {std::size_t{0}, std::size_t{1}, parts.size() - 1}) {
      std::vector<std::vector<std::uint8_t>> frames;
      for (const auto& f : parts[i]) {
        const auto* b = static_cast<const std::uint8_t*>(f.data());
        frames.emplace_back(b, b + f.size());
      }
      write("fuzz_decode_message", "part-" + std::to_string(i), join(frames));
    }
  }
  {
    OutMessage m(1, 3);
    m.header().setEpoch(2);
    auto hb = m.header().getBody().initHeartbeat();
    hb.setSamplesTrained(640);
    hb.setSteps(20);
    hb.setBatchSize(32);
    message("heartbeat", std::move(m));
  }
  {
    OutMessage m(1, 0);
    auto r = m.header().getBody().initRegister();
    r.setRole(proto::Role::TRAINER);
    r.setHost("host");
    r.setPid(42);
    r.setName("w0");
    message("register", std::move(m));
  }
  {
    OutMessage m(1, 0);
    auto gc = m.header().getBody().initGroupConfig();
    gc.setGroupId(1);
    gc.setExchangePeriod(2);
    auto members = gc.initMembers(2);
    members[0].setWorkerId(3);
    members[0].setBatchSize(32);
    members[1].setWorkerId(4);
    members[1].setLeaving(proto::Directive::REASSIGN);
    message("group-config", std::move(m));
  }
  message("error", makeErrorReply(1, 0, invalidArgument("bad")));
  {
    OutMessage m = push(1);
    m.addTensor(ramp(16));
    message("push-dense", std::move(m));
  }
  {
    OutMessage m = push(1);
    m.addTensor(ramp(16), 16);  // four chunks of 16 bytes
    m.addTensor(ramp(5), 8);    // 20 bytes: chunks of 8, 8, 4
    message("push-dense-chunked", std::move(m));
  }
  {
    OutMessage m = push(1);
    m.addTensor(std::make_shared<std::vector<float>>());  // empty tensor: one empty frame
    message("push-empty-tensor", std::move(m));
  }
  message("push-fp16", encodedPush(kernels::Encoding::kFp16, 10, 0, kDefaultChunkBytes));
  message("push-topk", encodedPush(kernels::Encoding::kTopK, 40, 0.1f, 12));
  message("push-sign", encodedPush(kernels::Encoding::kSign, 13, 0, kDefaultChunkBytes));
  {  // Near-misses, each failing one check.
    OutMessage m = push(1);
    m.header().setProtocolVersion(2);
    message("bad-protocol-version", std::move(m));
    OutMessage j = push(1);
    j.header().setJobId(7);
    message("bad-job", std::move(j));
    OutMessage k = push(1);
    k.addTensor(ramp(8));
    auto frames = framesOf(std::move(k));
    frames[1].push_back(0);  // longer than the header declares
    write("fuzz_decode_message", "bad-frame-too-long", join(frames));
    frames[1].pop_back();
    auto missing = frames;
    missing.pop_back();
    write("fuzz_decode_message", "bad-frame-missing", join(missing));
    auto extra = frames;
    extra.push_back({1, 2, 3, 4});
    write("fuzz_decode_message", "bad-frame-extra", join(extra));
    auto misaligned = frames;
    misaligned[0].pop_back();
    write("fuzz_decode_message", "bad-header-misaligned", join(misaligned));
  }
  {  // top-k with indices out of order (the length checks pass; decode refuses it)
    auto bytes = std::make_shared<std::vector<std::uint8_t>>(4 + 8 * 2, 0);
    const std::uint32_t count = 2, i0 = 5, i1 = 3;
    const float v = 1.0f;
    std::memcpy(bytes->data(), &count, 4);
    std::memcpy(bytes->data() + 4, &i0, 4);
    std::memcpy(bytes->data() + 8, &i1, 4);
    std::memcpy(bytes->data() + 12, &v, 4);
    std::memcpy(bytes->data() + 16, &v, 4);
    OutMessage m = push(1);
    m.addEncodedTensor(bytes, proto::Encoding::TOPK, 8);
    message("bad-topk-order", std::move(m));
  }
}

void payloads() {
  const char* names[] = {"dense", "fp16", "topk", "sign"};
  for (int e = 0; e < 4; ++e) {
    const auto enc = static_cast<kernels::Encoding>(e);
    for (std::uint16_t n : {0, 1, 9, 64}) {
      kernels::Compressor c(enc, n, 0.2f);
      std::vector<std::uint8_t> payload;
      c.encode(*ramp(n), &payload);
      std::vector<std::uint8_t> in = {static_cast<std::uint8_t>(e),
                                      static_cast<std::uint8_t>(n & 0xff),
                                      static_cast<std::uint8_t>(n >> 8)};
      in.insert(in.end(), payload.begin(), payload.end());
      write("fuzz_compression_decode", std::string(names[e]) + "-" + std::to_string(n), in);
      if (!payload.empty()) {  // one byte short
        in.pop_back();
        write("fuzz_compression_decode", std::string(names[e]) + "-" + std::to_string(n) + "-short",
              in);
      }
    }
    // Round-trip mode: 12 floats, top-k ratio 0.25.
    std::vector<std::uint8_t> rt = {static_cast<std::uint8_t>(e | 4), 0xff, 0x3f};
    auto values = ramp(12);
    const auto* p = reinterpret_cast<const std::uint8_t*>(values->data());
    rt.insert(rt.end(), p, p + 48);
    write("fuzz_compression_decode", std::string("roundtrip-") + names[e], rt);
  }
}

// fuzz_checkpoint_file: real checkpoints (writeCheckpoint) of 0, 1 and 37 parameters,
// format 1 and (37-adamw) format 2 with an optimizer section, and near-misses: cut short,
// one byte flipped at the end (a checksum), one header byte flipped.
void checkpoints() {
  const fs::path tmp = g_dir / ".ckpt-seeds";
  const std::pair<std::size_t, bool> cases[] = {{0, false}, {1, false}, {37, false}, {37, true}};
  for (const auto& [n, with_state] : cases) {  // with_state: adamw moments (format 2)
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    std::vector<float> params(n);
    for (std::size_t i = 0; i < n; ++i) params[i] = 0.25f * static_cast<float>(i) - 3.0f;
    kernels::OptimizerSnapshot state;
    if (with_state) {
      state.kind = kernels::OptimizerKind::kAdamW;
      state.buffers = 2;
      state.steps = 5;
      for (std::size_t i = 0; i < 2 * n; ++i) state.values.push_back(1e-3f * static_cast<float>(i));
    }
    centralps::CheckpointWriteInfo info;
    if (!centralps::writeCheckpoint(tmp.string(), 42 + n, params, 1, &info,
                                    with_state ? &state : nullptr)) {
      std::fprintf(stderr, "fuzz_make_seeds: writeCheckpoint failed\n");
      std::exit(1);
    }
    std::ifstream in(info.path, std::ios::binary);
    std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    const std::string tag = "ckpt-" + std::to_string(n) + (with_state ? "-adamw" : "");
    write("fuzz_checkpoint_file", tag, bytes);
    write("fuzz_checkpoint_file", tag + "-short",
          std::vector<std::uint8_t>(bytes.begin(),
                                    bytes.end() - std::min<std::size_t>(bytes.size(), 3)));
    auto flipped = bytes;
    flipped.back() ^= 0x40;
    write("fuzz_checkpoint_file", tag + "-payload-flip", flipped);
    flipped = bytes;
    flipped[20] ^= 0x01;
    write("fuzz_checkpoint_file", tag + "-header-flip", flipped);
  }
  fs::remove_all(tmp);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  g_dir = argv[1];
  messages();
  payloads();
  checkpoints();
  std::printf("seeds written under %s\n", argv[1]);
  return 0;
}
