package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func jsonUnmarshal(s string, v any) error {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("parse %q: %w", tail(s, 300), err)
	}
	return nil
}

// runSizes are the full and quick sizes: the full run stays under 15 minutes
// on the 2-core development VM, the quick one around 2.
func runSizes(quick bool) sizes {
	if quick {
		return sizes{rounds: 1, wrkFor: 2 * time.Second, blob: 128 << 20, dnsFor: 2 * time.Second, startRuns: 5, pooledN: 5, sandboxes: 10,
			tunnels: 200, tunnelHold: 8 * time.Second, manyTunnels: 1000, manySandboxes: 20, scanBytes: 64 << 20, loopN: 50, daemonRounds: 1}
	}
	return sizes{rounds: 3, wrkFor: 5 * time.Second, blob: 1 << 30, dnsFor: 5 * time.Second, startRuns: 20, pooledN: 30, sandboxes: 100,
		tunnels: 1000, tunnelHold: 20 * time.Second, manyTunnels: 10000, manySandboxes: 20, scanBytes: 512 << 20, loopN: 500, daemonRounds: 2}
}

func main() {
	bin := flag.String("airlock", "bin/airlock", "the airlock binary")
	client := flag.String("loadclient", "bin/loadclient", "bench/loadclient, built")
	doc := flag.String("doc", "docs/BENCHMARKS.md", "the file whose marked section is replaced")
	raw := flag.String("raw", "docs/bench/compare.json", "where the raw numbers go")
	quick := flag.Bool("quick", false, "a ~2-minute smoke run (one round, small sizes)")
	perfDir := flag.String("perf", "", "record `perf record -g` of every airlock run into this directory (profiling; the doc is not written)")
	only := flag.String("only", "", "run only the measures of these groups, comma-separated (http, bulk, dns, start, daemon); the doc is not written")
	render := flag.Bool("render", false, "only rewrite -doc's section from the numbers already in -raw (no measuring)")
	before := flag.String("before", "", "airlock built from an earlier revision (BENCH_BEFORE): every airlock row is measured with it too, alternating")
	beforeRev := flag.String("before-rev", "", "the revision -before was built from, for the report")
	user := flag.String("rootless-user", "", "the unprivileged user the rootless rows run as (scripts/ci-user.sh makes alk-ci); empty: no rootless rows")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *render {
		if err := rerender(*doc, *raw); err != nil {
			log.Error("bench-compare -render failed", "err", err)
			os.Exit(1)
		}
		return
	}
	if *perfDir != "" && *only == "" {
		*only = "http,bulk,dns"
	}
	if (*before == "") != (*beforeRev == "") {
		log.Error("bench-compare: -before and -before-rev go together")
		os.Exit(2)
	}
	o := options{bin: *bin, client: *client, doc: *doc, raw: *raw, quick: *quick, only: *only, perfDir: *perfDir,
		before: *before, beforeRev: *beforeRev, user: *user}
	if err := run(log, o); err != nil {
		log.Error("bench-compare failed", "err", err)
		os.Exit(1)
	}
}

// options are one run's flags.
type options struct {
	bin, client, doc, raw string
	quick                 bool
	only, perfDir         string
	before, beforeRev     string
	user                  string
}

func run(log *slog.Logger, o options) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("bench-compare needs root (namespaces, airlock run, the peers)")
	}
	bin, client, doc, raw, quick, only, perfDir := o.bin, o.client, o.doc, o.raw, o.quick, o.only, o.perfDir
	z := runSizes(quick)
	started := time.Now()
	mach := describeMachine(bin)
	if o.before != "" {
		if _, err := os.Stat(o.before); err != nil {
			return fmt.Errorf("-before: %w", err)
		}
		mach.Before = o.beforeRev
		mach.Versions["airlock before"] = o.beforeRev + ": " + firstLine(o.before, "version")
	}
	// SIGINT/SIGTERM/SIGHUP cancel ctx: the running command gets SIGTERM (an
	// airlock run tears its sandbox down), the run fails, and the deferred
	// close removes everything else.
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stopSignals()
	e, err := newEnv(ctx, bin, client)
	e.perfDir, e.before = perfDir, o.before
	defer e.close()
	if err != nil {
		return err
	}
	if o.user != "" {
		if e.user, err = lookupUser(o.user); err != nil {
			return err
		}
	}
	if err := e.rootlessDirs(); err != nil {
		return err
	}
	for name, start := range map[string]func() error{"squid": e.startSquid, "dnsmasq": e.startDnsmasq, "unbound": e.startUnbound} {
		if err := start(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	want := func(g string) bool { return only == "" || slices.Contains(strings.Split(only, ","), g) }
	var rounded []measure
	if want("http") {
		ms, err := e.httpMeasures(z)
		if err != nil {
			return err
		}
		rounded = append(rounded, ms...)
	}
	if want("bulk") {
		rounded = append(rounded, e.bulkMeasures(z)...)
	}
	if want("dns") {
		ms, err := e.dnsMeasures(z)
		if err != nil {
			return err
		}
		rounded = append(rounded, ms...)
	}
	if want("start") {
		rounded = append(rounded, e.startMeasure(z))
	}
	rounds := z.rounds
	if err := measureRounds(ctx, log, rounded, rounds); err != nil {
		return err
	}
	all := rounded
	if want("daemon") {
		ms, err := e.daemonRounds(log, z)
		if err != nil {
			return fmt.Errorf("daemon: %w", err)
		}
		all = besideStart(append(all, ms...))
	}
	mach.LoadEnd = loadavg()
	mach.Took = time.Since(started).Round(time.Second).String()
	mach.Rounds, mach.Quick = rounds, quick
	if only != "" {
		fmt.Println(renderTable(all))
		return nil
	}
	return writeReport(doc, raw, mach, all)
}

// measureRounds runs every subject of ms once a round: each round starts
// with a different subject, and a subject's before build runs right beside
// it, first in every other round. A before build that lacks the feature
// (errLacks) is n/a from then on; any other failure fails the run.
func measureRounds(ctx context.Context, log *slog.Logger, rounded []measure, rounds int) error {
	for r := range rounds {
		for i := range rounded {
			m := &rounded[i]
			// Alternate: each round starts with a different subject, and
			// a subject's before build goes first in every other round.
			for k := range m.Subjects {
				s := &m.Subjects[(k+r)%len(m.Subjects)]
				order := []*subject{s}
				if s.Before != nil && s.Before.run != nil {
					order = append(order, s.Before)
					if r%2 == 1 {
						order[0], order[1] = order[1], order[0]
					}
				}
				for _, x := range order {
					name := s.Name
					if x != s {
						name += " (before)"
					}
					if x.run == nil {
						continue
					}
					t0 := time.Now()
					got, out, err := x.run()
					if ctx.Err() != nil {
						return fmt.Errorf("interrupted: %w", context.Cause(ctx))
					}
					if x != s && errors.Is(err, errLacks) {
						x.Note, x.run = "n/a: "+err.Error(), nil
						log.Info("before build lacks the feature", "measure", m.Name, "subject", name, "err", err)
						continue
					}
					if err != nil {
						return fmt.Errorf("%s, %s, round %d: %w\n%s", m.Name, name, r+1, err, tail(out, 1500))
					}
					x.Rounds = append(x.Rounds, got)
					log.Info("measured", "measure", m.Name, "subject", name, "round", r+1, "took", time.Since(t0).Round(time.Millisecond), "got", got)
				}
			}
		}
	}
	return nil
}

// besideStart moves the daemon's start row (measured with the daemon, last)
// to just after the other sandbox starts, where a reader compares them.
func besideStart(ms []measure) []measure {
	si, di := -1, -1
	for i := range ms {
		switch ms[i].Name {
		case startName:
			si = i
		case daemonStartName:
			di = i
		}
	}
	if si < 0 || di < 0 || di < si {
		return ms
	}
	d := ms[di]
	out := append([]measure{}, ms[:si+1]...)
	out = append(out, d)
	out = append(out, ms[si+1:di]...)
	return append(out, ms[di+1:]...)
}

// rerender rewrites doc's section from the raw numbers of an earlier run.
func rerender(doc, raw string) error {
	b, err := os.ReadFile(raw)
	if err != nil {
		return err
	}
	var r struct {
		Machine  machine   `json:"machine"`
		Measures []measure `json:"measures"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", raw, err)
	}
	return writeReport(doc, raw, r.Machine, r.Measures)
}
