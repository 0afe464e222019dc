// cv_channel: a bounded channel of capacity 8 built from a mutex and two condition variables,
// with a producer thread and a consumer thread: the CROSS-THREAD row, not comparable with the
// same-thread ones.
//
// One message at a time: the producer stamps the message with steady_clock::now() and pushes
// it; the consumer pops it and records now() - stamp; the producer sends the next only after
// the consumer has recorded the previous one (outside the timed region). Timed region per
// message: from before the push to after the pop returns it on the other thread.
//
// usage: cv_channel [--messages N] [--warmup N]
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common.hpp"

template <typename T>
class BoundedChannel {
 public:
  explicit BoundedChannel(std::size_t capacity) : capacity_(capacity) {}

  void send(T value) {
    std::unique_lock lock(mutex_);
    not_full_.wait(lock, [&] { return queue_.size() < capacity_; });
    queue_.push_back(value);
    not_empty_.notify_one();
  }

  T receive() {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return !queue_.empty(); });
    T value = queue_.front();
    queue_.pop_front();
    not_full_.notify_one();
    return value;
  }

 private:
  std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> queue_;
};

struct Msg {
  std::uint64_t seq;
  Clock::time_point sent;
};

int main(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  const std::uint64_t total = args.warmup + args.messages;
  std::vector<std::uint64_t> values;
  values.reserve(args.messages);
  BoundedChannel<Msg> ch(8);
  BoundedChannel<std::uint64_t> ack(1);  // one message at a time
  std::thread consumer([&] {
    for (std::uint64_t i = 0; i < total; ++i) {
      Msg got = ch.receive();
      auto elapsed = Clock::now() - got.sent;
      if (got.seq != i) std::abort();
      if (i >= args.warmup) values.push_back(nanos(elapsed));
      ack.send(i);
    }
  });
  for (std::uint64_t i = 0; i < total; ++i) {
    ch.send(Msg{i, Clock::now()});
    ack.receive();
  }
  consumer.join();
  print_report("cv_channel", "cross-thread: producer and consumer threads, mutex + two condition variables", args, values);
  return 0;
}
