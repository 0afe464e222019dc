// asio_channel: the mailbox workload on asio::experimental::channel<void(asio::error_code, Msg)>
// with capacity 8, on one io_context (the same-thread analogue of a current-thread tokio
// runtime). One co_spawned coroutine sends then receives each message, as the Rust rows do
// in one task.
//
// Timed region per message: steady_clock::now(); co_await async_send; co_await async_receive
// of that message; steady_clock::now(). Prints one JSON line with the raw per-message values;
// percentiles are computed by the Rust side (cargo xtask compare).
//
// usage: asio_channel [--messages N] [--warmup N]
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/channel.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include "common.hpp"

struct Msg {
  std::uint64_t seq;
};

using Channel = asio::experimental::channel<void(asio::error_code, Msg)>;

asio::awaitable<void> run(Channel& ch, const Args& args, std::vector<std::uint64_t>& values) {
  const std::uint64_t total = args.warmup + args.messages;
  for (std::uint64_t i = 0; i < total; ++i) {
    auto start = Clock::now();
    co_await ch.async_send(asio::error_code{}, Msg{i}, asio::use_awaitable);
    Msg got = co_await ch.async_receive(asio::use_awaitable);
    auto elapsed = Clock::now() - start;
    if (got.seq != i) throw std::runtime_error("asio channel returned another message");
    if (i >= args.warmup) values.push_back(nanos(elapsed));
  }
}

int main(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  std::vector<std::uint64_t> values;
  values.reserve(args.messages);
  asio::io_context ctx(1);
  Channel ch(ctx, 8);
  std::exception_ptr failure;
  asio::co_spawn(ctx, run(ch, args, values), [&](std::exception_ptr e) { failure = e; });
  ctx.run();
  if (failure) std::rethrow_exception(failure);
  print_report("asio_channel", "same-thread: one coroutine sends then receives, one io_context", args, values);
  return 0;
}
