#include "groupsgd/common/socket_poll.h"

#include <doctest/doctest.h>

#include <csignal>
#include <thread>

using namespace groupsgd;
using namespace std::chrono_literals;

TEST_CASE("pollReadable: nothing in time, then the socket that has a message") {
  zmq::context_t ctx(1);
  zmq::socket_t a_in(ctx, zmq::socket_type::pair), a_out(ctx, zmq::socket_type::pair);
  zmq::socket_t b_in(ctx, zmq::socket_type::pair), b_out(ctx, zmq::socket_type::pair);
  a_in.bind("inproc://a");
  a_out.connect("inproc://a");
  b_in.bind("inproc://b");
  b_out.connect("inproc://b");

  auto none = pollReadable(a_in, &b_in, 20ms);
  REQUIRE(none.isOk());
  CHECK(*none == 0u);
  auto one = pollReadable(a_in, 1ms);
  REQUIRE(one.isOk());
  CHECK_FALSE(*one);

  b_out.send(zmq::str_buffer("x"), zmq::send_flags::none);
  auto second = pollReadable(a_in, &b_in, 1000ms);
  REQUIRE(second.isOk());
  CHECK(*second == 2u);
  a_out.send(zmq::str_buffer("y"), zmq::send_flags::none);
  auto both = pollReadable(a_in, &b_in, 1000ms);
  REQUIRE(both.isOk());
  CHECK(*both == 3u);
  auto first = pollReadable(a_in, 1000ms);
  REQUIRE(first.isOk());
  CHECK(*first);
  // A list with a gap: bits stay at the sockets' places.
  zmq::socket_t* const listed[] = {nullptr, &b_in, nullptr, &a_in};
  auto gaps = pollReadable(std::span<zmq::socket_t* const>(listed), 1000ms);
  REQUIRE(gaps.isOk());
  CHECK(*gaps == ((1u << 1) | (1u << 3)));
}

TEST_CASE("pollReadable: a signal ends the wait early with nothing, not an error") {
  zmq::context_t ctx(1);
  zmq::socket_t in(ctx, zmq::socket_type::pair);
  in.bind("inproc://signal");
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  struct sigaction old {};
  sigaction(SIGUSR1, &sa, &old);  // no SA_RESTART: the poll returns EINTR
  const pthread_t self = pthread_self();
  std::thread poker([self] {
    std::this_thread::sleep_for(50ms);
    pthread_kill(self, SIGUSR1);
  });
  const auto start = std::chrono::steady_clock::now();
  auto r = pollReadable(in, 5000ms);
  const auto waited = std::chrono::steady_clock::now() - start;
  poker.join();
  sigaction(SIGUSR1, &old, nullptr);
  REQUIRE(r.isOk());
  CHECK_FALSE(*r);
  CHECK(waited < 4000ms);  // cut short by the signal, not the timeout
}

TEST_CASE("pollReadable: a socket of a context shut down is an error") {
  zmq::context_t ctx(1);
  zmq::socket_t in(ctx, zmq::socket_type::pair);
  in.bind("inproc://shut");
  ctx.shutdown();  // what a daemon's stop does to every blocked call: ETERM
  auto r = pollReadable(in, 10ms);
  CHECK_FALSE(r.isOk());
  in.close();
}
