// Fuzz target: the control socket's request lines. The input is a byte stream as a client
// would write it; it is cut into lines the way the server does (split at '\n', a trailing
// '\r' dropped, blank lines skipped, lines over the 64 KiB cap refused before parsing) and
// each line goes through decodeControlRequest, then into the reply the server would send.
// Oracles: exactly one of request / error; an accepted request names a method of the table,
// has object params and a string, number or null id; every reply serialises.
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "groupsgd/ops/control_protocol.h"

using namespace groupsgd::ops;

namespace {

void checkLine(std::string_view line, const std::vector<ControlMethod>& methods) {
  ControlDecoded d = decodeControlRequest(line, methods);
  FUZZ_CHECK(d.request.has_value() != d.error.has_value());
  nlohmann::ordered_json reply;
  if (d.error) {
    FUZZ_CHECK(!d.error->message.empty());
    FUZZ_CHECK(d.error->id.is_null() || d.error->id.is_string() || d.error->id.is_number());
    reply = makeErrorReply(d.error->id, d.error->code, d.error->message);
    FUZZ_CHECK(parseControlError(controlErrorName(d.error->code)) == d.error->code);
  } else {
    const ControlRequest& r = *d.request;
    FUZZ_CHECK(r.id.is_null() || r.id.is_string() || r.id.is_number());
    FUZZ_CHECK(r.params.is_object());
    bool known = false;
    for (const auto& m : methods) known |= m.name == r.method && m.admin == r.admin;
    FUZZ_CHECK(known);
    reply = makeOkReply(r.id, nlohmann::ordered_json{{"method", r.method}, {"params", r.params}});
  }
  // As Connection::send writes it (invalid UTF-8 replaced, never thrown).
  const std::string out =
      reply.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  FUZZ_CHECK(!out.empty() && out.find('\n') == std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<ControlMethod> methods = defaultControlMethods();
  constexpr std::size_t kCap = 64 * 1024;  // ControlServerOptions::max_request_bytes
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.size() > kCap) continue;  // answered too_large by the server
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    checkLine(line, methods);
  }
  return 0;
}
