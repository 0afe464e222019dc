// go_channel: the mailbox workload on a buffered Go channel, make(chan msg, 8), run with
// GOMAXPROCS=1 (the same-thread analogue of a current-thread tokio runtime). One goroutine
// sends then receives each message, as the Rust rows do in one task; msg is a plain value:
// no allocation per message.
//
// Timed region per message: time.Now(); ch <- m; <-ch returning that message; time.Since.
// Prints one JSON line with the raw per-message values; percentiles are computed by the Rust
// side (cargo xtask compare).
//
// usage: go_channel [--messages N] [--warmup N]
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

type msg struct {
	seq uint64
}

func clockOverheadNs() uint64 {
	v := make([]uint64, 20000)
	for i := range v {
		a := time.Now()
		v[i] = uint64(time.Since(a).Nanoseconds())
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[len(v)/2]
}

func main() {
	messages := flag.Uint64("messages", 200000, "measured messages")
	warmup := flag.Uint64("warmup", 10000, "messages before measuring")
	flag.Parse()
	if *messages == 0 {
		fmt.Fprintln(os.Stderr, "`--messages` must be at least 1")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(1)
	ch := make(chan msg, 8)
	values := make([]uint64, 0, *messages)
	total := *warmup + *messages
	for i := uint64(0); i < total; i++ {
		start := time.Now()
		ch <- msg{seq: i}
		got := <-ch
		elapsed := time.Since(start)
		if got.seq != i {
			panic("the channel returned another message")
		}
		if i >= *warmup {
			values = append(values, uint64(elapsed.Nanoseconds()))
		}
	}
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = strconv.FormatUint(v, 10)
	}
	fmt.Printf("{\"workload\":\"go_channel\",\"shape\":\"same-thread: one goroutine sends then receives, GOMAXPROCS=1\",\"messages\":%d,\"warmup\":%d,\"capacity\":8,\"clock_overhead_ns\":%d,\"values_ns\":[%s]}\n",
		*messages, *warmup, clockOverheadNs(), strings.Join(parts, ","))
}
