package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/bench"
)

func init() {
	register("bench", "measure the job path: a pool burst and a cold-start burst; `bench replay`: a generated week through simulate (JSON)", cmdBench)
}

func cmdBench(ctx context.Context, e *env, args []string) int {
	if len(args) > 0 && args[0] == "replay" {
		return benchReplay(ctx, e, args[1:])
	}
	fs := e.flags("bench")
	jobs := fs.Int("jobs", 1000, "jobs per burst (the pool holds as many stopped instances)")
	asJSON := fs.Bool("json", false, "print one JSON object (the default output is the same object, indented)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up on a burst after this long")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	only := fs.String("only", "", "run one scenario: "+strings.Join(bench.Scenarios, " or "))
	var state stateFlags
	fs.StringVar(&state.store, "store", "sqlite://", "sqlite:// (a temporary file of its own: no path), or dynamodb://TABLE to run on DynamoDB and SQS and count their calls per job (a table of its own, made by bullpen aws bootstrap)")
	fs.StringVar(&state.queue, "queue", "", "with --store dynamodb://: sqs://PREFIX")
	fs.StringVar(&state.region, "aws-region", or(e.getenv("AWS_REGION"), "us-east-1"), "with --store dynamodb://: the region")
	fs.StringVar(&state.endpoint, "aws-endpoint", e.getenv("BULLPEN_AWS_ENDPOINT"), "with --store dynamodb://: an emulator's URL (moto)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: bullpen bench [flags]
       bullpen bench replay [flags]

bench measures the job path from the webhook to the job assigned, in two
bursts: jobs served by a pool's stopped instances, and jobs that need new
machines. It prints one JSON object. bench replay times a generated week of
jobs through simulate instead (bullpen bench replay -h).

`)
		fs.PrintDefaults()
	}
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	if path, ok := strings.CutPrefix(state.store, "sqlite://"); ok && path != "" {
		fmt.Fprintf(e.stderr, "bullpen bench: --store %s: bench keeps its SQLite state in a temporary file of its own; give sqlite:// or dynamodb://TABLE\n", state.store)
		return 2
	}
	if state.store == "sqlite://" {
		state.store = "sqlite://bench" // the bench's own temporary file
	}
	_, shared, err := state.parse()
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen bench:", err)
		return 2
	}
	if *jobs <= 0 {
		fmt.Fprintln(e.stderr, "bullpen bench: --jobs must be positive")
		return 2
	}
	if err := bench.CheckScenario(*only); err != nil {
		fmt.Fprintf(e.stderr, "bullpen bench: --only: %v\n", err)
		return 2
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen bench:", err)
		return 1
	}
	defer stop()
	res, err := bench.Run(ctx, bench.Options{Jobs: *jobs, Timeout: *timeout, Only: *only, Shared: shared})
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen bench:", err)
		return 1
	}
	enc := json.NewEncoder(e.stdout)
	if !*asJSON {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(res); err != nil {
		return 1
	}
	return 0
}

// startCPUProfile writes a CPU profile to path until stop is called; an
// empty path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
