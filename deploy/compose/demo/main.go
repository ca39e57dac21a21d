// Command demo is the traffic and the sink of the Compose demo
// (deploy/compose): not part of wowd.
//
//	demo produce -brokers kafka:9092 -context example-service -topics wow.example.cart.event,wow.example.order.event
//	demo sink -listen :8080
//
// produce writes Wow-shaped domain events, the same as `wowd dev --demo`.
// sink is an HTTP endpoint for wowd's http handler: it answers 204 after a
// configurable latency, and can fail a share of requests transiently (503,
// which wowd retries) or permanently (422, which wowd dead-letters) so the
// dashboard and the alerts have something to show.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/devbroker"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: demo produce|sink [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "produce":
		err = produce(ctx, os.Args[2:])
	case "sink":
		err = sink(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want produce or sink", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func produce(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	brokers := fs.String("brokers", "kafka:9092", "comma-separated bootstrap brokers")
	contextName := fs.String("context", "example-service", "bounded context name written into the events")
	topics := fs.String("topics", "wow.example.cart.event,wow.example.order.event", "comma-separated event topics")
	rate := fs.Int("rate", 20, "records per second")
	_ = fs.Parse(args)
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	d, err := devbroker.StartDemo(ctx, strings.Split(*brokers, ","), devbroker.DemoTopics(*contextName, strings.Split(*topics, ",")), *rate, log)
	if err != nil {
		return err
	}
	d.Wait()
	return nil
}

func sink(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sink", flag.ExitOnError)
	listen := fs.String("listen", ":8080", "address to listen on")
	latency := fs.Duration("latency", 20*time.Millisecond, "mean time before answering (uniformly 0..2x)")
	fail := fs.Float64("fail", envFloat("SINK_FAIL_RATIO", 0.01), "share of requests answered 503 (transient: retried; env SINK_FAIL_RATIO)")
	reject := fs.Float64("reject", envFloat("SINK_REJECT_RATIO", 0.001), "share of requests answered 422 (permanent: dead-lettered; env SINK_REJECT_RATIO)")
	_ = fs.Parse(args)

	var handled atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("POST /wow", func(w http.ResponseWriter, r *http.Request) {
		if *latency > 0 {
			time.Sleep(time.Duration(rand.Int64N(int64(2 * *latency))))
		}
		switch p := rand.Float64(); {
		case p < *reject:
			http.Error(w, "demo sink: rejected for the demo", http.StatusUnprocessableEntity)
			return
		case p < *reject+*fail:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "demo sink: failing for the demo", http.StatusServiceUnavailable)
			return
		}
		if n := handled.Add(1); n%1000 == 1 {
			fmt.Printf("demo sink: %d messages handled; last %s %s of %s\n", n,
				r.Header.Get("ce-type"), r.Header.Get("ce-subject"), r.Header.Get("ce-source"))
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("demo sink on %s: latency ~%s, %.1f%% transient failures, %.1f%% rejections\n",
		*listen, *latency, 100**fail, 100**reject)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func envFloat(name string, def float64) float64 {
	var f float64
	if _, err := fmt.Sscan(os.Getenv(name), &f); err == nil {
		return f
	}
	return def
}
