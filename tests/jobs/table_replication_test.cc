// The --serve daemon's standby link, the job table's half (jobs/src/table_replication.h):
// a --serve standby's hello gets the table at once, then on a change or when the heartbeat
// is due; a one-run standby's hello gets a snapshot naming a --serve daemon (which that
// standby refuses); a Superseded of an older term is ignored.
#include "table_replication.h"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "groupsgd/centralps/replication.h"
#include "groupsgd/common/transport.h"

using namespace groupsgd;
using namespace groupsgd::jobs;
using centralps::ReplicationKind;
using centralps::ReplicationMessage;
using namespace std::chrono_literals;

namespace {

void sendMessage(zmq::socket_t& sock, const ReplicationMessage& m) {
  REQUIRE(sendFrames(sock, centralps::encodeReplication(m)).isOk());
}

// The next message on sock within `wait` while the link is polled, or nullopt.
std::optional<ReplicationMessage> next(zmq::socket_t& sock, TableLink& link, bool changed,
                                       const std::string& table,
                                       std::chrono::milliseconds wait = 1000ms) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    link.poll(changed, [&] { return table; });
    changed = false;
    zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 10ms);
    if ((item.revents & ZMQ_POLLIN) != 0) {
      auto frames = recvFrames(sock);
      REQUIRE(frames.isOk());
      auto m = centralps::decodeReplication(*frames);
      REQUIRE(m.isOk());
      return *m;
    }
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("table link: the table to a --serve standby; a one-run standby told what it reached") {
  zmq::context_t ctx(1);
  auto link = TableLink::create(ctx, "tcp://127.0.0.1:*", CurveKeys{}, 3, 400);
  REQUIRE(link.isOk());
  zmq::socket_t one(ctx, zmq::socket_type::dealer), serve(ctx, zmq::socket_type::dealer);
  one.set(zmq::sockopt::linger, 0);
  serve.set(zmq::sockopt::linger, 0);
  one.connect((*link)->endpoint());
  serve.connect((*link)->endpoint());

  // A one-run head's standby: a snapshot of no parameters naming the --serve daemon.
  ReplicationMessage hello;
  hello.kind = ReplicationKind::kHello;
  sendMessage(one, hello);
  auto snap = next(one, **link, false, "{}");
  REQUIRE(snap.has_value());
  CHECK(snap->kind == ReplicationKind::kSnapshot);
  CHECK(snap->text == kServePrimaryRole);
  CHECK(snap->term == 3);
  CHECK(snap->param_count == 0);
  // ... and it is not taken for the standby: no table follows.
  CHECK(!next(one, **link, true, "{}", 300ms).has_value());

  // A --serve standby: the table at once, with the term and a revision.
  hello.text = kServeStandbyHello;
  sendMessage(serve, hello);
  auto table = next(serve, **link, false, R"({"role":"all"})");
  REQUIRE(table.has_value());
  CHECK(table->kind == ReplicationKind::kHeartbeat);
  CHECK(table->term == 3);
  CHECK(table->version == 1);
  CHECK(table->text == R"({"role":"all"})");
  // Not due yet (a quarter of 400 ms) and unchanged: nothing; changed: at once.
  (*link)->poll(false, [] { return std::string("x"); });
  zmq::pollitem_t item{serve.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, 20ms);
  CHECK((item.revents & ZMQ_POLLIN) == 0);
  auto changed = next(serve, **link, true, "changed", 50ms);
  REQUIRE(changed.has_value());
  CHECK(changed->version == 2);
  CHECK(changed->text == "changed");
  // The heartbeat: the table again within the quarter.
  auto beat = next(serve, **link, false, "beat", 400ms);
  REQUIRE(beat.has_value());
  CHECK(beat->version == 3);

  // A Superseded of an older term is no newer head: the link serves on.
  ReplicationMessage old;
  old.kind = ReplicationKind::kSuperseded;
  old.term = 2;
  sendMessage(serve, old);
  auto after = next(serve, **link, true, "still");
  REQUIRE(after.has_value());
  CHECK(after->text == "still");
}

TEST_CASE("table link: acknowledgements count only from the attached standby, of tables sent") {
  zmq::context_t ctx(1);
  auto link = TableLink::create(ctx, "tcp://127.0.0.1:*", CurveKeys{}, 1, 400);
  REQUIRE(link.isOk());
  CHECK(!(*link)->attached());
  zmq::socket_t serve(ctx, zmq::socket_type::dealer), other(ctx, zmq::socket_type::dealer);
  serve.set(zmq::sockopt::linger, 0);
  other.set(zmq::sockopt::linger, 0);
  serve.connect((*link)->endpoint());
  other.connect((*link)->endpoint());

  ReplicationMessage hello;
  hello.kind = ReplicationKind::kHello;
  hello.text = kServeStandbyHello;
  sendMessage(serve, hello);
  auto first = next(serve, **link, false, "t1");
  REQUIRE(first.has_value());
  CHECK((*link)->attached());
  CHECK((*link)->revision() == first->version);
  CHECK((*link)->acked() == 0);

  // The acknowledgement of what it applied, polled in.
  const auto pollFor = [&](auto pred) {
    for (int i = 0; i < 100 && !pred(); ++i) {
      (*link)->poll(false, [] { return std::string("t"); });
      std::this_thread::sleep_for(5ms);
    }
    return pred();
  };
  ReplicationMessage ack;
  ack.kind = ReplicationKind::kAck;
  ack.term = 1;
  ack.version = first->version;
  sendMessage(serve, ack);
  CHECK(pollFor([&] { return (*link)->acked() == first->version; }));

  // Heartbeats sent meanwhile are dropped: the next read is the change's table.
  const auto drain = [&] {
    zmq::message_t msg;
    while (serve.recv(msg, zmq::recv_flags::dontwait)) {
    }
  };
  // A change: a new revision, not acknowledged until the standby says so.
  drain();
  auto changed = next(serve, **link, true, "t2", 50ms);
  REQUIRE(changed.has_value());
  CHECK((*link)->revision() == changed->version);
  CHECK((*link)->acked() < changed->version);
  // Another peer's acknowledgement, and one of a revision never sent, count for nothing.
  ack.version = changed->version;
  sendMessage(other, ack);
  ack.version = changed->version + 10;
  sendMessage(serve, ack);
  CHECK(!pollFor([&] { return (*link)->acked() != first->version; }));
  ack.version = changed->version;
  sendMessage(serve, ack);
  CHECK(pollFor([&] { return (*link)->acked() == changed->version; }));

  // A hello again (the standby restarted): nothing of it is acknowledged yet.
  const std::uint64_t before = (*link)->revision();
  sendMessage(serve, hello);
  CHECK(pollFor([&] { return (*link)->acked() == 0; }));
  CHECK((*link)->revision() > before);  // the table at once
}
