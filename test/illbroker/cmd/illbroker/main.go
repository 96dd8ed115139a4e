package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

func main() {
	var cfg illbroker.Config
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of every random choice")
	flag.DurationVar(&cfg.AsyncDelay, "async-delay", 2*time.Second, "how long an asynchronous operation stays in progress")
	flag.Float64Var(&cfg.FailRate, "fail-rate", 0, "fraction of OSB requests that fail transiently (0..1)")
	flag.Float64Var(&cfg.FailedOpRate, "failed-op-rate", 0, "fraction of asynchronous provisions that end failed after creating the instance (0..1)")
	flag.IntVar(&cfg.DuplicateStatus, "duplicate-status", 0, "answer to a create of an existing instance id: 409, 500, 0 for a seeded choice, or 200 for the spec's (200 or 202 to an identical request, 409 to another)")
	flag.BoolVar(&cfg.NotRetrievable, "not-retrievable", false, "leave instances_retrievable and bindings_retrievable out of the catalog")
	flag.BoolVar(&cfg.ForgetfulLastOperation, "forgetful-last-operation", false, `answer every last_operation without "operation" with state failed, "The operation could not be found."`)
	flag.BoolVar(&cfg.LoseFirstAnswer, "lose-first-answer", false, "carry out the first create of each instance and binding id, then drop the connection instead of answering")
	flag.Parse()
	if err := run(*listen, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "illbroker:", err)
		os.Exit(1)
	}
}

func run(listen string, cfg illbroker.Config) error {
	cfg.Username, cfg.Password = os.Getenv("ILLBROKER_USERNAME"), os.Getenv("ILLBROKER_PASSWORD")
	switch {
	case cfg.Username == "" || cfg.Password == "":
		return errors.New("set ILLBROKER_USERNAME and ILLBROKER_PASSWORD")
	case cfg.FailRate < 0 || cfg.FailRate > 1 || cfg.FailedOpRate < 0 || cfg.FailedOpRate > 1:
		return errors.New("-fail-rate and -failed-op-rate must be within 0..1")
	case !slices.Contains([]int{0, http.StatusOK, http.StatusConflict, http.StatusInternalServerError}, cfg.DuplicateStatus):
		return fmt.Errorf("-duplicate-status %d: want 409, 500, 200 or 0", cfg.DuplicateStatus)
	case cfg.AsyncDelay < 0:
		return errors.New("-async-delay must not be negative")
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	slog.Info("Serving", "addr", l.Addr().String(), "seed", cfg.Seed, "async_delay", cfg.AsyncDelay,
		"fail_rate", cfg.FailRate, "failed_op_rate", cfg.FailedOpRate, "duplicate_status", cfg.DuplicateStatus,
		"forgetful_last_operation", cfg.ForgetfulLastOperation, "lose_first_answer", cfg.LoseFirstAnswer)
	srv := &http.Server{Handler: illbroker.New(cfg), ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(l)
}
