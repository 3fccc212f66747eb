#include "groupsgd/groupps/group_stats.h"

#include <doctest/doctest.h>

#include <capnp/message.h>

#include "support/proto_fields.h"

using namespace groupsgd;
using groupps::GroupStats;

TEST_CASE("group stats: every field survives a round trip through Cap'n Proto") {
  GroupStats in;
  in.group_id = 1;
  in.step = 2;
  in.samples_received = 3;
  in.samples_dropped = 4;
  in.samples_pending = 5;
  in.samples_in_flight = 6;
  in.late_gradients = 7;
  in.bad_messages = 8;
  in.exchanges = 9;
  in.refused_exchanges = 10;
  in.last_loss = 11.5f;
  in.members = 12;
  in.acknowledged = {{13, 14}, {15, 16}};
  in.identity_refused = 17;
  in.quarantined = {18, 19};
  in.replayed_pushes = 20;
  in.quarantine_refusals = 21;
  in.bad_parts = 22;
  in.pushes_waited = 23;
  in.steps_cut = 24;
  in.learning_rate = 0.25f;
  in.run_samples = 26;

  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<proto::GroupStats>();
  groupps::toProto(in, builder);
  CHECK(testing::fieldsLeftDefault(builder.asReader()).empty());

  const GroupStats out = groupps::fromProto(builder.asReader());
  CHECK(out.group_id == 1);
  CHECK(out.step == 2);
  CHECK(out.samples_received == 3);
  CHECK(out.samples_dropped == 4);
  CHECK(out.samples_pending == 5);
  CHECK(out.samples_in_flight == 6);
  CHECK(out.late_gradients == 7);
  CHECK(out.bad_messages == 8);
  CHECK(out.exchanges == 9);
  CHECK(out.refused_exchanges == 10);
  CHECK(out.last_loss == 11.5f);
  CHECK(out.members == 12);
  CHECK(out.acknowledged == std::map<std::uint64_t, std::uint64_t>{{13, 14}, {15, 16}});
  CHECK(out.identity_refused == 17);
  CHECK(out.quarantined == std::vector<std::uint64_t>{18, 19});
  CHECK(out.replayed_pushes == 20);
  CHECK(out.quarantine_refusals == 21);
  CHECK(out.bad_parts == 22);
  CHECK(out.pushes_waited == 23);
  CHECK(out.steps_cut == 24);
  CHECK(out.learning_rate == 0.25f);
  CHECK(out.run_samples == 26);
}

TEST_CASE("group stats: a worker listed twice in acknowledged counts twice") {
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<proto::GroupStats>();
  auto ack = builder.initAcknowledged(2);
  ack[0].setWorkerId(3);
  ack[0].setSamples(10);
  ack[1].setWorkerId(3);
  ack[1].setSamples(5);
  CHECK(groupps::fromProto(builder.asReader()).acknowledged.at(3) == 15);
}
