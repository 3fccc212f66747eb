// PendingRequest and the admin rule: the parts of control_server.h that run on the
// coordinator's side of the queue.
#include <unistd.h>

#include <utility>
#include <vector>

#include "groupsgd/common/log.h"
#include "groupsgd/ops/control_server.h"

namespace groupsgd::ops {

using nlohmann::ordered_json;

std::vector<uid_t> defaultAdminUids() { return {0, ::geteuid()}; }

bool isAdminCaller(const Caller& caller, const ControlServerOptions& options) {
  for (uid_t uid : options.admin_uids) {
    if (caller.uid == uid) return true;
  }
  if (options.admin_gid) {
    if (caller.gid == *options.admin_gid) return true;
    for (gid_t g : caller.groups) {
      if (g == *options.admin_gid) return true;
    }
  }
  return false;
}

// ---- PendingRequest ----

PendingRequest::PendingRequest(ControlRequest request, Deliver deliver)
    : request_(std::move(request)), deliver_(std::move(deliver)) {}

PendingRequest::PendingRequest(PendingRequest&& other) noexcept
    : request_(std::move(other.request_)), deliver_(std::move(other.deliver_)) {
  other.deliver_ = nullptr;
}

PendingRequest& PendingRequest::operator=(PendingRequest&& other) noexcept {
  if (this != &other) {
    if (deliver_) fail(ControlError::kInternal, "dropped without a reply");
    request_ = std::move(other.request_);
    deliver_ = std::move(other.deliver_);
    other.deliver_ = nullptr;
  }
  return *this;
}

PendingRequest::~PendingRequest() {
  if (deliver_) fail(ControlError::kInternal, "dropped without a reply");
}

void PendingRequest::send(ordered_json reply) {
  if (!deliver_) return;
  Deliver deliver = std::move(deliver_);
  deliver_ = nullptr;
  try {
    deliver(std::move(reply));
  } catch (const std::exception& e) {
    GSGD_ERROR("control: cannot deliver a reply: " << e.what());
  }
}

void PendingRequest::respond(ordered_json result) {
  if (!deliver_) return;
  send(makeOkReply(request_.id, std::move(result)));
}

void PendingRequest::fail(ControlError code, std::string_view message) {
  if (!deliver_) return;
  send(makeErrorReply(request_.id, code, message));
}

void PendingRequest::fail(const Status& status) {
  fail(controlErrorFor(status.code()), status.message());
}

}  // namespace groupsgd::ops
