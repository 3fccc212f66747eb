// Contract tests of the control socket: every error code, the connection surviving each
// error, the size cap, the socket file's mode and takeover rules, peer credentials, the
// admin rule, concurrency, and the queue's wake fd.
#include "groupsgd/ops/control_server.h"

#include <doctest/doctest.h>

#include <poll.h>
#include <sys/stat.h>

#include <fstream>
#include <mutex>
#include <vector>

#include "groupsgd/ops/control_client.h"
#include "groupsgd/ops/metrics.h"
#include "ops_test_util.h"

using namespace groupsgd;
using namespace groupsgd::ops;
using groupsgd::testing::FakeCoordinator;
using groupsgd::testing::RawClient;
using groupsgd::testing::TempDir;
using nlohmann::json;
using std::chrono::milliseconds;

namespace {

ControlServerOptions optionsAt(const TempDir& dir) {
  ControlServerOptions o;
  o.path = dir.file("control.sock");
  return o;
}

std::unique_ptr<ControlServer> startServer(ControlServerOptions o) {
  auto server = ControlServer::start(std::move(o));
  REQUIRE_MESSAGE(server.isOk(), server.status().toString());
  return std::move(*server);
}

std::string errorCode(const json& reply) {
  if (!reply.is_object() || reply.value("ok", true)) return "<ok or not an object>";
  return reply["error"]["code"].get<std::string>();
}

// A valid request on the same connection still works: the connection survived.
void checkStillUsable(RawClient& c) {
  c.send(R"({"id": "after", "method": "version"})"
         "\n");
  const json reply = c.readJson();
  CHECK(reply["id"] == "after");
  CHECK(reply["ok"] == true);
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// A server whose coordinator echoes each request, and a raw client connected to it.
struct EchoServer {
  TempDir dir;
  std::unique_ptr<ControlServer> server = startServer(optionsAt(dir));
  FakeCoordinator coord{*server, testing::echoHandler};
  RawClient c{server->path()};
};

}  // namespace

TEST_CASE_FIXTURE(
    EchoServer,
    "control server: answers a request with the coordinator's result and echoes the id") {
  c.send(R"({"id": 7, "method": "status", "params": {"x": 1}})"
         "\n");
  json reply = c.readJson();
  CHECK(reply["id"] == 7);
  CHECK(reply["ok"] == true);
  CHECK(reply["result"]["method"] == "status");
  CHECK(reply["result"]["params"] == json{{"x", 1}});

  c.send(R"({"id": "abc", "method": "status"})"
         "\n");
  reply = c.readJson();
  CHECK(reply["id"] == "abc");
  CHECK(reply["result"]["params"] == json::object());  // absent params = {}

  c.send(R"({"method": "status", "params": null})"
         "\n");
  reply = c.readJson();
  CHECK(reply["id"].is_null());
  CHECK(reply["ok"] == true);
}

TEST_CASE_FIXTURE(EchoServer, "control server: unknown fields are ignored") {
  c.send(R"({"jsonrpc": "2.0", "id": 1, "method": "groups", "params": {}, "extra": [1, 2]})"
         "\n");
  const json reply = c.readJson();
  CHECK(reply["ok"] == true);
  CHECK(reply["result"]["method"] == "groups");
}

TEST_CASE_FIXTURE(EchoServer,
                  "control server: parse_error and invalid_request keep the connection usable") {
  c.send("{not json\n");
  json reply = c.readJson();
  CHECK(errorCode(reply) == "parse_error");
  CHECK(reply["id"].is_null());
  checkStillUsable(c);

  for (const char* line :
       {"[1, 2]", "\"status\"", "42", R"({"id": 1})", R"({"id": 1, "method": 5})",
        R"({"id": {"a": 1}, "method": "status"})", R"({"id": true, "method": "status"})"}) {
    CAPTURE(line);
    c.send(std::string(line) + "\n");
    reply = c.readJson();
    CHECK(errorCode(reply) == "invalid_request");
    checkStillUsable(c);
  }
  // The id is echoed when it is usable, even if the method is missing.
  c.send(R"({"id": 9})"
         "\n");
  reply = c.readJson();
  CHECK(reply["id"] == 9);
}

TEST_CASE_FIXTURE(EchoServer, "control server: method_not_found and invalid_params") {
  c.send(R"({"id": 2, "method": "frobnicate"})"
         "\n");
  json reply = c.readJson();
  CHECK(errorCode(reply) == "method_not_found");
  CHECK(reply["id"] == 2);
  CHECK(reply["error"]["message"].get<std::string>().find("frobnicate") != std::string::npos);
  checkStillUsable(c);

  c.send(R"({"id": 3, "method": "status", "params": [1, 2]})"
         "\n");
  reply = c.readJson();
  CHECK(errorCode(reply) == "invalid_params");
  CHECK(reply["id"] == 3);
  checkStillUsable(c);

  // invalid_params decided by the coordinator.
  c.send(R"({"id": 4, "method": "drain", "params": {"worker": 999}})"
         "\n");
  reply = c.readJson();
  CHECK(errorCode(reply) == "invalid_params");
  CHECK(reply["error"]["message"] == "no worker 999");
  checkStillUsable(c);
}

TEST_CASE("control server: too_large replies once, discards to the newline, and keeps going") {
  TempDir dir;
  auto options = optionsAt(dir);
  options.max_request_bytes = 1024;
  auto server = startServer(options);
  FakeCoordinator coord(*server, testing::echoHandler);
  RawClient c(server->path());

  SUBCASE("a long line sent at once") {
    c.send(R"({"id": 1, "method": "status", "params": {"pad": ")" + std::string(5000, 'x') +
           "\"}}\n");
    const json reply = c.readJson();
    CHECK(errorCode(reply) == "too_large");
    checkStillUsable(c);
  }
  SUBCASE("a huge line in pieces: one reply before its end, then nothing for the rest") {
    c.send(std::string(4096, 'y'));
    const json reply = c.readJson();  // answered before the newline arrives
    CHECK(errorCode(reply) == "too_large");
    for (int i = 0; i < 50; ++i) c.send(std::string(4096, 'z'));
    c.send("\n");
    checkStillUsable(c);  // no second too_large in between
  }
  SUBCASE("a line of exactly the cap is accepted") {
    std::string line = R"({"id": "exact", "method": "status"})";
    line += std::string(1024 - line.size(), ' ');
    REQUIRE(line.size() == 1024);
    c.send(line + "\n");
    const json reply = c.readJson();
    CHECK(reply["ok"] == true);
    CHECK(reply["id"] == "exact");
  }
}

TEST_CASE_FIXTURE(EchoServer,
                  "control server: deep nesting inside the cap is refused without harm") {
  c.send(std::string(30000, '[') + std::string(30000, ']') + "\n");
  CHECK(errorCode(c.readJson()) == "invalid_request");
  c.send(std::string(30000, '[') + "\n");  // unbalanced
  CHECK(errorCode(c.readJson()) == "parse_error");
  checkStillUsable(c);
}

TEST_CASE_FIXTURE(EchoServer,
                  "control server: requests pipelined in one write are answered in order") {
  c.send(R"({"id": 1, "method": "status"})"
         "\n"
         "\n"  // a blank line is skipped
         R"({"id": 2, "method": "bogus"})"
         "\r\n"
         R"({"id": 3, "method": "groups"})"
         "\n");
  CHECK(c.readJson()["id"] == 1);
  const json second = c.readJson();
  CHECK(second["id"] == 2);
  CHECK(errorCode(second) == "method_not_found");
  CHECK(c.readJson()["id"] == 3);
}

TEST_CASE(
    "control server: a last line without newline is answered after the client shuts down writing") {
  TempDir dir;
  auto server = startServer(optionsAt(dir));
  FakeCoordinator coord(*server, testing::echoHandler);
  RawClient c(server->path());
  c.send(R"({"id": "last", "method": "status"})");
  c.shutdownWrite();
  const json reply = c.readJson();
  CHECK(reply["id"] == "last");
  CHECK(c.readLine() == "");
  CHECK(c.closed());
}

TEST_CASE(
    "control server: refused while refusing, when the queue is full, and over the connection cap") {
  TempDir dir;
  auto options = optionsAt(dir);
  options.max_pending = 1;
  options.max_connections = 2;
  auto server = startServer(options);

  SUBCASE("setRefusing") {
    FakeCoordinator coord(*server, testing::echoHandler);
    RawClient c(server->path());
    server->setRefusing("shutting down");
    c.send(R"({"id": 1, "method": "status"})"
           "\n");
    const json reply = c.readJson();
    CHECK(errorCode(reply) == "refused");
    CHECK(reply["error"]["message"] == "shutting down");
    server->setRefusing(std::nullopt);
    checkStillUsable(c);
  }
  SUBCASE("queue full: nobody pops") {
    RawClient a(server->path());
    RawClient b(server->path());
    a.send(R"({"id": "a", "method": "status"})"
           "\n");
    // a's request sits in the queue; wait until it is there.
    for (int i = 0; i < 500 && !readable(server->wakeFd()); ++i)
      std::this_thread::sleep_for(milliseconds(2));
    REQUIRE(readable(server->wakeFd()));
    b.send(R"({"id": "b", "method": "status"})"
           "\n");
    const json reply = b.readJson();
    CHECK(errorCode(reply) == "refused");
    CHECK(reply["id"] == "b");
    auto pending = server->tryPop();
    REQUIRE(pending.has_value());
    CHECK(pending->request().id == "a");
    pending->respond("done");
    CHECK(a.readJson()["result"] == "done");
  }
  SUBCASE("too many connections") {
    FakeCoordinator coord(*server, testing::echoHandler);
    RawClient a(server->path());
    RawClient b(server->path());
    checkStillUsable(a);
    checkStillUsable(b);
    RawClient third(server->path());
    const json reply = third.readJson();
    CHECK(errorCode(reply) == "refused");
    CHECK(third.readLine() == "");
    CHECK(third.closed());
    checkStillUsable(a);
  }
}

TEST_CASE("control server: a request dropped by the coordinator is answered internal") {
  TempDir dir;
  auto server = startServer(optionsAt(dir));
  FakeCoordinator coord(*server, [](PendingRequest&& req) {
    if (req.method() == "regroup") return;  // dropped: destroyed unanswered
    testing::echoHandler(std::move(req));
  });
  RawClient c(server->path());
  c.send(R"({"id": 5, "method": "regroup"})"
         "\n");
  const json reply = c.readJson();
  CHECK(errorCode(reply) == "internal");
  CHECK(reply["id"] == 5);
  checkStillUsable(c);
}

TEST_CASE("control server: socket file mode is set explicitly") {
  TempDir dir;
  const mode_t old_umask = ::umask(0);  // the mode must not depend on the umask
  {
    auto server = startServer(optionsAt(dir));
    struct stat st {};
    REQUIRE(::stat(server->path().c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 07777) == 0660);
  }
  ::umask(077);
  {
    auto options = optionsAt(dir);
    options.mode = 0600;
    auto server = startServer(options);
    struct stat st {};
    REQUIRE(::stat(server->path().c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
  }
  ::umask(old_umask);
  CHECK(!std::filesystem::exists(dir.file("control.sock")));  // removed when the server stopped
}

TEST_CASE("control server: stale socket files are replaced, live ones and other files are not") {
  TempDir dir;
  const std::string path = dir.file("control.sock");
  SUBCASE("stale: a socket file nobody listens on") {
    {
      const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
      REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
      ::close(fd);  // leaves the file behind, as a crashed daemon would
    }
    REQUIRE(std::filesystem::is_socket(path));
    auto server = startServer(optionsAt(dir));
    FakeCoordinator coord(*server, testing::echoHandler);
    RawClient c(path);
    checkStillUsable(c);
  }
  SUBCASE("live: another server answers") {
    auto first = startServer(optionsAt(dir));
    auto second = ControlServer::start(optionsAt(dir));
    REQUIRE(!second.isOk());
    CHECK(second.status().code() == Code::kFailedPrecondition);
    CHECK(second.status().message().find("another daemon") != std::string::npos);
    FakeCoordinator coord(*first, testing::echoHandler);
    RawClient c(path);  // the first one still serves
    checkStillUsable(c);
  }
  SUBCASE("not a socket") {
    { std::ofstream(path) << "precious"; }
    auto server = ControlServer::start(optionsAt(dir));
    REQUIRE(!server.isOk());
    CHECK(server.status().message().find("not a socket") != std::string::npos);
    std::ifstream in(path);
    std::string content;
    in >> content;
    CHECK(content == "precious");
  }
  SUBCASE("bad paths") {
    ControlServerOptions o;
    o.path = "";
    CHECK(!ControlServer::start(o).isOk());
    o.path = "/tmp/" + std::string(200, 'p');
    CHECK(ControlServer::start(o).status().code() == Code::kInvalidArgument);
    o.path = dir.file("missing-dir/control.sock");
    CHECK(ControlServer::start(o).status().code() == Code::kUnavailable);
  }
}

TEST_CASE("control server: SO_PEERCRED gives the caller's pid, uid and gid to the handler") {
  TempDir dir;
  auto server = startServer(optionsAt(dir));
  FakeCoordinator coord(*server, testing::echoHandler);
  auto client = ControlClient::connect(server->path(), milliseconds(2000));
  REQUIRE(client.isOk());
  auto reply = client->call("status", json::object(), milliseconds(2000));
  REQUIRE(reply.isOk());
  const json caller = (*reply)["result"]["caller"];
  CHECK(caller["pid"] == ::getpid());
  CHECK(caller["uid"] == ::getuid());
  CHECK(caller["gid"] == ::getgid());
}

TEST_CASE("control server: admin methods need an admin caller") {
  TempDir dir;
  auto options = optionsAt(dir);
  // Neither root (this test may run as root) nor the server's own uid (the client's).
  options.admin_uids = {::getuid() + 4242};

  SUBCASE("refused for a non-admin; read-only methods still allowed") {
    auto server = startServer(options);
    FakeCoordinator coord(*server, testing::echoHandler);
    RawClient c(server->path());
    for (const char* m :
         {"drain", "undrain", "unquarantine", "regroup", "set", "checkpoint", "shutdown"}) {
      CAPTURE(m);
      c.send(json{{"id", m}, {"method", m}, {"params", {{"worker", 1}}}}.dump() + "\n");
      const json reply = c.readJson();
      CHECK(errorCode(reply) == "permission_denied");
      CHECK(reply["id"] == m);
    }
    for (const char* m : {"version", "status", "workers", "groups"}) {
      CAPTURE(m);
      c.send(json{{"id", m}, {"method", m}}.dump() + "\n");
      CHECK(c.readJson()["ok"] == true);
    }
  }
  SUBCASE("allowed by the admin gid") {
    options.admin_gid = ::getgid();
    auto server = startServer(options);
    FakeCoordinator coord(*server, testing::echoHandler);
    RawClient c(server->path());
    c.send(R"({"id": 1, "method": "regroup", "params": {"dry_run": true}})"
           "\n");
    const json reply = c.readJson();
    CHECK(reply["ok"] == true);
  }
  SUBCASE("allowed as the daemon's own uid") {
    options.admin_uids.push_back(::geteuid());
    auto server = startServer(options);
    FakeCoordinator coord(*server, testing::echoHandler);
    RawClient c(server->path());
    c.send(R"({"id": 1, "method": "shutdown"})"
           "\n");
    CHECK(c.readJson()["ok"] == true);
  }
}

TEST_CASE("control server: the admin rule") {
  ControlServerOptions o;
  Caller root{1, 0, 0, {}};
  Caller other{2, 5000, 5000, {100, 200}};
  Caller self{3, ::geteuid(), 4000, {}};
  CHECK(isAdminCaller(root, o));  // by default: root and the daemon's own uid
  CHECK(isAdminCaller(self, o));
  CHECK(!isAdminCaller(other, o));
  o.admin_uids = {};
  CHECK(!isAdminCaller(root, o));
  CHECK(!isAdminCaller(self, o));
  o.admin_gid = 200;  // a supplementary group counts
  CHECK(isAdminCaller(other, o));
  o.admin_gid = 300;
  CHECK(!isAdminCaller(other, o));
  o.admin_uids = {5000};
  CHECK(isAdminCaller(other, o));
}

TEST_CASE("control server: two concurrent clients, one slow request does not block the other") {
  TempDir dir;
  auto server = startServer(optionsAt(dir));
  std::mutex mu;
  std::vector<PendingRequest> held;
  FakeCoordinator coord(*server, [&](PendingRequest&& req) {
    if (req.method() == "drain") {  // held until a "status" arrives
      std::lock_guard<std::mutex> lock(mu);
      held.push_back(std::move(req));
      return;
    }
    testing::echoHandler(std::move(req));
    std::lock_guard<std::mutex> lock(mu);
    for (auto& h : held) h.respond("drained");
    held.clear();
  });
  RawClient a(server->path());
  RawClient b(server->path());
  a.send(R"({"id": "slow", "method": "drain", "params": {"worker": 1, "wait": true}})"
         "\n");
  CHECK(a.readLine(milliseconds(100)) == "<timeout>");  // held
  b.send(R"({"id": "fast", "method": "status"})"
         "\n");
  CHECK(b.readJson()["id"] == "fast");
  const json slow = a.readJson();
  CHECK(slow["id"] == "slow");
  CHECK(slow["result"] == "drained");

  // Many requests from two threads, each on its own connection.
  auto hammer = [&](const std::string& who, int* ok) {
    auto client = ControlClient::connect(server->path(), milliseconds(2000));
    if (!client) return;
    for (int i = 0; i < 100; ++i) {
      auto reply = client->call("status", {{"who", who}, {"i", i}}, milliseconds(5000));
      if (reply && (*reply)["ok"] == true && (*reply)["result"]["params"]["who"] == who &&
          (*reply)["result"]["params"]["i"] == i) {
        *ok += 1;
      }
    }
  };
  int ok_a = 0, ok_b = 0;
  std::thread ta(hammer, "a", &ok_a);
  std::thread tb(hammer, "b", &ok_b);
  ta.join();
  tb.join();
  CHECK(ok_a == 100);
  CHECK(ok_b == 100);
}

TEST_CASE("control server: wakeFd is readable exactly while requests are queued") {
  TempDir dir;
  auto server = startServer(optionsAt(dir));
  CHECK(!readable(server->wakeFd()));
  CHECK(!server->tryPop().has_value());
  RawClient a(server->path());
  RawClient b(server->path());
  a.send(R"({"id": 1, "method": "status"})"
         "\n");
  b.send(R"({"id": 2, "method": "groups"})"
         "\n");
  for (int i = 0; i < 500; ++i) {
    pollfd p{server->wakeFd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    if (p.revents & POLLIN) break;
  }
  CHECK(readable(server->wakeFd()));
  auto first = server->waitPop(milliseconds(2000));
  REQUIRE(first.has_value());
  auto second = server->waitPop(milliseconds(2000));
  REQUIRE(second.has_value());
  CHECK(!readable(server->wakeFd()));
  CHECK(!server->tryPop().has_value());
  first->respond(1);
  second->respond(2);
  CHECK(a.readJson()["result"] == 1);
  CHECK(b.readJson()["result"] == 2);
}

TEST_CASE(
    "control server: PendingRequest answers once; answers after the server stopped go nowhere") {
  TempDir dir;
  auto server = startServer(optionsAt(dir));
  RawClient c(server->path());
  c.send(R"({"id": 1, "method": "status"})"
         "\n");
  auto req = server->waitPop(milliseconds(2000));
  REQUIRE(req.has_value());
  CHECK(req->request().method == "status");
  CHECK(!req->request().admin);
  CHECK(!req->answered());
  req->respond("first");
  CHECK(req->answered());
  req->respond("second");  // ignored
  req->fail(ControlError::kInternal, "ignored too");
  CHECK(c.readJson()["result"] == "first");
  CHECK(c.readLine(milliseconds(100)) == "<timeout>");

  c.send(R"({"id": 2, "method": "drain", "params": {"worker": 3}})"
         "\n");
  auto held = server->waitPop(milliseconds(2000));
  REQUIRE(held.has_value());
  CHECK(held->request().admin);
  server.reset();             // the daemon stops while the coordinator still holds a request
  held->respond("too late");  // must not crash or block
  CHECK(c.readLine() == "");
  CHECK(c.closed());
}

TEST_CASE("control server: Status failures map to protocol codes") {
  CHECK(controlErrorFor(Code::kInvalidArgument) == ControlError::kInvalidParams);
  CHECK(controlErrorFor(Code::kNotFound) == ControlError::kInvalidParams);
  CHECK(controlErrorFor(Code::kFailedPrecondition) == ControlError::kRefused);
  CHECK(controlErrorFor(Code::kUnavailable) == ControlError::kRefused);
  CHECK(controlErrorFor(Code::kPermissionDenied) == ControlError::kPermissionDenied);
  CHECK(controlErrorFor(Code::kInternal) == ControlError::kInternal);
  for (auto code :
       {ControlError::kParseError, ControlError::kInvalidRequest, ControlError::kMethodNotFound,
        ControlError::kInvalidParams, ControlError::kTooLarge, ControlError::kRefused,
        ControlError::kPermissionDenied, ControlError::kInternal}) {
    CHECK(parseControlError(controlErrorName(code)) == code);
  }
  CHECK(!parseControlError("nope").has_value());

  nlohmann::ordered_json delivered;
  PendingRequest req(ControlRequest{json("x"), "checkpoint", json::object(), {}, true},
                     [&](nlohmann::ordered_json reply) { delivered = std::move(reply); });
  req.fail(failedPrecondition("a checkpoint is already running"));
  CHECK(
      delivered.dump() ==
      R"({"id":"x","ok":false,"error":{"code":"refused","message":"a checkpoint is already running"}})");
}

TEST_CASE("control server: counts requests by method and code in the metrics registry") {
  TempDir dir;
  MetricsRegistry metrics;
  auto options = optionsAt(dir);
  options.metrics = &metrics;
  auto server = startServer(options);
  FakeCoordinator coord(*server, testing::echoHandler);
  {
    RawClient c(server->path());
    c.send("nonsense\n");
    c.readJson();
    c.send(R"({"id": 1, "method": "status"})"
           "\n");
    c.readJson();
    c.send(R"({"id": 2, "method": "checkpoint"})"
           "\n");
    c.readJson();
  }
  const std::string text = metrics.render();
  CHECK(text.find(R"(groupsgd_control_requests_total{method="other",code="parse_error"} 1)") !=
        std::string::npos);
  CHECK(text.find(R"(groupsgd_control_requests_total{method="status",code="ok"} 1)") !=
        std::string::npos);
  CHECK(text.find(R"(groupsgd_control_requests_total{method="checkpoint",code="refused"} 1)") !=
        std::string::npos);
  CHECK(text.find("# TYPE groupsgd_control_connections gauge") != std::string::npos);
}

TEST_CASE("control client: connect and read deadlines") {
  TempDir dir;
  const auto started = std::chrono::steady_clock::now();
  auto missing = ControlClient::connect(dir.file("nothing.sock"), milliseconds(500));
  REQUIRE(!missing.isOk());
  CHECK(missing.status().code() == Code::kUnavailable);
  CHECK(std::chrono::steady_clock::now() - started < milliseconds(400));  // fails at once

  auto server = startServer(optionsAt(dir));  // nobody pops: the reply never comes
  auto client = ControlClient::connect(server->path(), milliseconds(1000));
  REQUIRE(client.isOk());
  const auto t0 = std::chrono::steady_clock::now();
  auto reply = client->call("status", json::object(), milliseconds(200));
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(!reply.isOk());
  CHECK(reply.status().code() == Code::kUnavailable);
  CHECK(took >= milliseconds(190));
  CHECK(took < milliseconds(2000));
}

TEST_CASE("control protocol: decodeControlRequest is the server's line check, without I/O") {
  const auto methods = defaultControlMethods();
  auto ok = decodeControlRequest(R"({"id": 7, "method": "drain", "params": {"worker": 3}, "x": 1})",
                                 methods);
  REQUIRE(ok.request);
  CHECK_FALSE(ok.error);
  CHECK(ok.request->id == 7);
  CHECK(ok.request->method == "drain");
  CHECK(ok.request->admin);
  CHECK(ok.request->params["worker"] == 3);
  auto no_params = decodeControlRequest(R"({"method": "status", "params": null})", methods);
  REQUIRE(no_params.request);
  CHECK(no_params.request->id.is_null());
  CHECK(no_params.request->params == json::object());
  CHECK_FALSE(no_params.request->admin);

  struct Case {
    const char* line;
    ControlError code;
    json id;
    const char* method;
  };
  const Case cases[] = {
      {"{not json", ControlError::kParseError, nullptr, ""},
      {"[1, 2]", ControlError::kInvalidRequest, nullptr, ""},
      {R"({"id": [1], "method": "status"})", ControlError::kInvalidRequest, nullptr, ""},
      {R"({"id": "a"})", ControlError::kInvalidRequest, "a", ""},
      {R"({"id": "b", "method": 3})", ControlError::kInvalidRequest, "b", ""},
      {R"({"id": 1.5, "method": "nope"})", ControlError::kMethodNotFound, 1.5, ""},
      {R"({"id": null, "method": "set", "params": [1]})", ControlError::kInvalidParams, nullptr,
       "set"},
  };
  for (const Case& c : cases) {
    INFO(c.line);
    auto d = decodeControlRequest(c.line, methods);
    CHECK_FALSE(d.request);
    REQUIRE(d.error);
    CHECK(d.error->code == c.code);
    CHECK(d.error->id == c.id);
    CHECK(d.error->method == c.method);
    CHECK_FALSE(d.error->message.empty());
  }
}
