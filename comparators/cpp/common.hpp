// Shared by the C++ comparators: the command line (--messages N --warmup N), the clock, its
// measured overhead, and the one JSON line of raw values the Rust side reads.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>
#include <algorithm>

using Clock = std::chrono::steady_clock;

struct Args {
  std::uint64_t messages = 200000;
  std::uint64_t warmup = 10000;
};

inline Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "`%s` needs a value\n", flag.c_str());
      std::exit(2);
    }
    char* end = nullptr;
    std::uint64_t value = std::strtoull(argv[++i], &end, 10);
    if (*end != '\0') {
      std::fprintf(stderr, "`%s` takes a non-negative integer, not `%s`\n", flag.c_str(), argv[i]);
      std::exit(2);
    }
    if (flag == "--messages") args.messages = value;
    else if (flag == "--warmup") args.warmup = value;
    else {
      std::fprintf(stderr, "unknown flag `%s`\nusage: %s [--messages N] [--warmup N]\n", flag.c_str(), argv[0]);
      std::exit(2);
    }
  }
  if (args.messages == 0) {
    std::fprintf(stderr, "`--messages` must be at least 1\n");
    std::exit(2);
  }
  return args;
}

inline std::uint64_t nanos(Clock::duration d) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

// Median of 20,000 back-to-back now() pairs: the cost of an empty timed region.
inline std::uint64_t clock_overhead_ns() {
  std::vector<std::uint64_t> v;
  v.reserve(20000);
  for (int i = 0; i < 20000; ++i) {
    auto a = Clock::now();
    auto b = Clock::now();
    v.push_back(nanos(b - a));
  }
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

inline void print_report(const char* workload, const char* shape, const Args& args,
                         const std::vector<std::uint64_t>& values) {
  std::printf("{\"workload\":\"%s\",\"shape\":\"%s\",\"messages\":%llu,\"warmup\":%llu,\"capacity\":8,"
              "\"clock_overhead_ns\":%llu,\"values_ns\":[",
              workload, shape, static_cast<unsigned long long>(args.messages),
              static_cast<unsigned long long>(args.warmup),
              static_cast<unsigned long long>(clock_overhead_ns()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::printf(i ? ",%llu" : "%llu", static_cast<unsigned long long>(values[i]));
  }
  std::printf("]}\n");
}
