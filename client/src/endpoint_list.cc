#include "groupsgd/client/endpoint_list.h"

namespace groupsgd::client {
namespace {

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

Result<EndpointList> EndpointList::parse(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string item =
        trimmed(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) {
      return invalidArgument("empty entry in the coordinator endpoint list '" + text + "'");
    }
    if (item.find("://") == std::string::npos || item.find("://") == 0) {
      return invalidArgument("coordinator endpoint '" + item +
                             "' has no transport (expected e.g. tcp://host:port)");
    }
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return EndpointList(std::move(out));
}

const std::string& EndpointList::advance() {
  at_ = (at_ + 1) % endpoints_.size();
  return endpoints_[at_];
}

}  // namespace groupsgd::client
