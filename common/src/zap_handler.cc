#include "groupsgd/common/zap_handler.h"

#include <cstdio>
#include <cstdlib>

#include "groupsgd/common/log.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/transport.h"

namespace groupsgd {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

void exitOnFatal(const std::string& why) {
  std::fprintf(stderr,
               "fatal: the ZAP handler stopped (%s); exiting, since CURVE without it "
               "would admit any client\n",
               why.c_str());
  std::fflush(stderr);
  std::_Exit(70);
}

std::string frameText(const zmq::message_t& m) { return std::string(m.data<char>(), m.size()); }

}  // namespace

Result<std::unique_ptr<ZapHandler>> ZapHandler::start(zmq::context_t& ctx,
                                                      std::set<std::string> allowed,
                                                      FatalHook on_fatal) {
  for (const auto& k : allowed) {
    if (k.size() != 40) return invalidArgument("allow-list entry is not a Z85 key: " + k);
  }
  return start(ctx, std::make_shared<AllowList>(std::move(allowed)), std::move(on_fatal));
}

Result<std::unique_ptr<ZapHandler>> ZapHandler::start(zmq::context_t& ctx,
                                                      std::shared_ptr<AllowList> allowed,
                                                      FatalHook on_fatal) {
  if (allowed == nullptr) return invalidArgument("the ZAP handler needs an allow-list");
  try {
    zmq::socket_t sock(ctx, zmq::socket_type::rep);
    sock.set(zmq::sockopt::linger, 0);
    sock.bind(kZapEndpoint);
    std::unique_ptr<ZapHandler> h(
        new ZapHandler(std::move(sock), std::move(allowed), std::move(on_fatal)));
    h->thread_ = std::thread([raw = h.get()] { raw->run(); });
    return h;
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("cannot start the ZAP handler on ") + kZapEndpoint + ": " +
                       e.what());
  }
}

ZapHandler::ZapHandler(zmq::socket_t sock, std::shared_ptr<AllowList> allowed, FatalHook on_fatal)
    : sock_(std::move(sock)),
      allowed_(std::move(allowed)),
      on_fatal_(on_fatal ? std::move(on_fatal) : FatalHook(exitOnFatal)) {}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::run() {
  log::setThreadTag("zap");
  std::string failure;
  try {
    while (!stop_.load()) {
      auto readable = pollReadable(sock_, std::chrono::milliseconds(100));
      if (!readable) throw std::runtime_error(readable.status().message());
      if (!*readable) continue;
      auto request = recvFrames(sock_);
      if (!request) throw std::runtime_error(request.status().message());
      answer(*request);
    }
  } catch (const zmq::error_t& e) {
    if (e.num() != ETERM) failure = e.what();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  sock_.close();
  if (!failure.empty() && !stop_.load()) on_fatal_(failure);
}

// Request: version, request id, domain, address, routing id, mechanism, credentials...
// Reply:   version, request id, status code, status text, user id, metadata.
void ZapHandler::answer(std::vector<zmq::message_t>& request) {
  std::string code = "400";
  std::string text = "malformed ZAP request";
  std::string user;
  std::string request_id;
  if (request.size() >= 6 && frameText(request[0]) == "1.0") {
    request_id = frameText(request[1]);
    const std::string address = frameText(request[3]);
    const std::string mechanism = frameText(request[5]);
    if (mechanism == "CURVE" && request.size() == 7 && request[6].size() == 32) {
      char z85[41];
      zmq_z85_encode(z85, request[6].data<std::uint8_t>(), 32);
      if (allowed_->contains(z85)) {
        code = "200";
        text = "OK";
        user = z85;
      } else {
        text = "key not allowed";
        GSGD_WARN("refused a CURVE client from " << address << ": key " << z85
                                                 << " is not in the allow-list");
      }
    } else {
      text = "mechanism " + mechanism + " not allowed";
      GSGD_WARN("refused a " << mechanism << " client from " << address);
    }
  }
  (code == "200" ? admitted_ : refused_).fetch_add(1);
  std::vector<zmq::message_t> reply;
  reply.emplace_back(std::string("1.0"));
  reply.emplace_back(request_id);
  reply.emplace_back(code);
  reply.emplace_back(text);
  reply.emplace_back(user);
  reply.emplace_back(std::string());
  for (std::size_t i = 0; i < reply.size(); ++i) {
    sock_.send(reply[i], i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

std::string peerKey(const zmq::message_t& frame) {
  // zmq_msg_gets is not const in the C API but only reads the message's metadata.
  const char* v = zmq_msg_gets(const_cast<zmq::message_t&>(frame).handle(), "User-Id");
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace groupsgd
