package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/oplog"
)

// Stats are a Shipper's counters.
type Stats struct {
	Shipped    uint64 // records acknowledged by the collector
	Failed     uint64 // attempts that failed (sends and reads)
	GapRecords uint64 // records gone before they were shipped
	LastSeq    uint64 // last seq acknowledged (0: none)
	Lag        uint64 // records in the live file past LastSeq, as last measured
}

// Shipper ships one log to one sink: it reads from the last acknowledged
// position, batches, retries with back-off and saves the position after
// every acknowledged batch. It only reads the log's files, so a slow or dead
// collector never slows the writer.
type Shipper struct {
	cfg  Config
	src  ReadOptions
	sink Sink
	log  *slog.Logger

	shipped, failed, gaps, lastSeq atomic.Uint64
}

// DefaultStateFile names the state file of the sink called name for the
// live audit file live.
func DefaultStateFile(live, name string) string {
	return live + "." + name + StateSuffix
}

// New makes a Shipper of src to sink. cfg.StateFile "" keeps no state (every
// run starts at the chain's first record).
func New(cfg Config, src ReadOptions, sink Sink, log *slog.Logger) (*Shipper, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if src.Live == "" && len(src.Files) == 0 {
		return nil, errors.New("export: no audit file to ship")
	}
	return &Shipper{cfg: cfg, src: src, sink: sink, log: oplog.For(log, "audit-export").With("sink", cfg.Name)}, nil
}

// Stats returns the counters now; Lag is measured from the live file's
// last line at the call.
func (s *Shipper) Stats() Stats {
	st := Stats{Shipped: s.shipped.Load(), Failed: s.failed.Load(), GapRecords: s.gaps.Load(), LastSeq: s.lastSeq.Load()}
	if s.src.Live != "" {
		if head, err := lastSeq(s.src.Live); err == nil && head > st.LastSeq {
			st.Lag = head - st.LastSeq
		}
	}
	return st
}

// Run ships until the end of the files (without Follow) or until ctx ends
// (with Follow: read errors are logged and retried, from the last
// acknowledged position). It returns nil when ctx ends.
func (s *Shipper) Run(ctx context.Context) error {
	pos, err := s.load()
	if err != nil {
		return err
	}
	s.lastSeq.Store(pos.Seq)
	for attempt := 0; ; attempt++ {
		next, err := s.runOnce(ctx, pos)
		if next.Seq > pos.Seq {
			attempt = 0
		}
		pos = next
		if ctx.Err() != nil {
			return nil
		}
		if err == nil || !s.src.Follow || errors.Is(err, errGaveUp) {
			return err
		}
		s.failed.Add(1)
		s.log.Error("audit export: reading the log failed; retrying", oplog.ErrorKey, err, "last_seq", pos.Seq)
		if !s.sleep(ctx, attempt) {
			return nil
		}
	}
}

// load returns where shipping stands: the state file's position, or a JSONL
// file sink's last record when that is further on.
func (s *Shipper) load() (Position, error) {
	var pos Position
	if s.cfg.StateFile != "" {
		p, err := loadState(s.cfg.StateFile, s.cfg.Name)
		if err != nil {
			return pos, err
		}
		pos = p
	}
	if r, ok := s.sink.(resumer); ok && s.cfg.StateFile != "" {
		p, err := r.resume()
		if err != nil {
			return pos, err
		}
		if p.Seq > pos.Seq {
			s.log.Info("audit export: the sink holds records past the state file (a stop before the state write); resuming after them", "state_seq", pos.Seq, "sink_seq", p.Seq)
			pos = p
		}
	}
	return pos, nil
}

// runOnce reads from pos and ships until the reader stops; it returns the
// last acknowledged position.
func (s *Shipper) runOnce(ctx context.Context, pos Position) (Position, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan Event, s.cfg.BatchSize)
	readErr := make(chan error, 1)
	go func() {
		defer close(events)
		readErr <- Read(rctx, s.src, pos, s.log, func(e Event) error {
			select {
			case events <- e:
				return nil
			case <-rctx.Done():
				return rctx.Err()
			}
		})
	}()
	defer func() {
		cancel()
		for range events {
		}
	}()
	for {
		batch, more := s.collect(ctx, events)
		if len(batch) > 0 {
			if err := s.ship(ctx, batch); err != nil {
				return pos, err
			}
			if ctx.Err() != nil {
				return pos, nil
			}
			last := &batch[len(batch)-1]
			pos = Position{Seq: last.Seq(), Hash: last.Hash}
		}
		if !more {
			err := <-readErr
			if errors.Is(err, context.Canceled) {
				err = nil
			}
			return pos, err
		}
		if ctx.Err() != nil {
			return pos, nil
		}
	}
}

// collect waits for events and returns a batch: full, or what came within
// FlushInterval of the first event. more is false once the reader is done.
func (s *Shipper) collect(ctx context.Context, events <-chan Event) (batch []Event, more bool) {
	t := time.NewTimer(s.cfg.FlushInterval)
	defer t.Stop()
	for len(batch) < s.cfg.BatchSize {
		select {
		case e, ok := <-events:
			if !ok {
				return batch, false
			}
			batch = append(batch, e)
		case <-t.C:
			if len(batch) > 0 {
				return batch, true
			}
			t.Reset(s.cfg.FlushInterval)
		case <-ctx.Done():
			return nil, true
		}
	}
	return batch, true
}

// errGaveUp: a batch was tried MaxAttempts times.
var errGaveUp = errors.New("export: collector did not take the batch")

// ship sends batch until the collector acknowledges it, then saves the
// position. When ctx ends first nothing is saved (the next run sends the
// batch again) and ship returns nil; after MaxAttempts it returns errGaveUp.
func (s *Shipper) ship(ctx context.Context, batch []Event) error {
	for attempt := 0; ; attempt++ {
		// A send in flight is not cut short when ctx ends: a stop waits for
		// the collector's answer (at most Timeout), so a batch the collector
		// took is never left unrecorded by a clean stop.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
		err := s.sink.Send(sctx, batch)
		cancel()
		if err == nil {
			break
		}
		s.failed.Add(1)
		if ctx.Err() != nil {
			return nil
		}
		if s.cfg.MaxAttempts > 0 && attempt+1 >= s.cfg.MaxAttempts {
			return fmt.Errorf("%w after %d attempts (seq %d..%d not shipped): %w", errGaveUp, attempt+1, batch[0].Seq(), batch[len(batch)-1].Seq(), err)
		}
		s.log.Warn("audit export: collector did not take the batch; retrying", oplog.ErrorKey, err, "attempt", attempt+1,
			"from_seq", batch[0].Seq(), "through_seq", batch[len(batch)-1].Seq())
		if !s.sleep(ctx, attempt) {
			return nil
		}
	}
	last := &batch[len(batch)-1]
	if s.cfg.StateFile != "" {
		// The collector has the batch: a crash before this write sends it
		// once more (see audit/DESIGN.md, "Audit export").
		for attempt := 0; ; attempt++ {
			err := saveState(s.cfg.StateFile, s.cfg.Name, Position{Seq: last.Seq(), Hash: last.Hash})
			if err == nil {
				break
			}
			s.failed.Add(1)
			s.log.Error("audit export: cannot save the shipped position", oplog.ErrorKey, err, oplog.FileKey, s.cfg.StateFile)
			if !s.sleep(ctx, attempt) {
				return nil
			}
		}
	}
	for i := range batch {
		if g := batch[i].Gap; g != nil {
			s.gaps.Add(g.Through - g.From + 1)
		} else {
			s.shipped.Add(1)
		}
	}
	s.lastSeq.Store(last.Seq())
	return nil
}

// sleep waits the back-off for attempt (0-based): BackoffMin doubled each
// attempt, capped at BackoffMax, with jitter down to half. False: ctx ended.
func (s *Shipper) sleep(ctx context.Context, attempt int) bool {
	d := s.cfg.BackoffMin << min(attempt, 30)
	if d > s.cfg.BackoffMax || d <= 0 {
		d = s.cfg.BackoffMax
	}
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// String names the shipper in logs.
func (s *Shipper) String() string {
	return fmt.Sprintf("audit export %s (%s %s)", s.cfg.Name, s.cfg.Format, s.cfg.Endpoint)
}
