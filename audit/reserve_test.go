package audit

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newGatedWriter is a writer with a queue of size places whose goroutine
// takes nothing until the test sends on (or closes) the returned gate.
func newGatedWriter(t *testing.T, size int, overflow string) (*Writer, Config, chan struct{}) {
	t.Helper()
	cfg := testConfig(t)
	cfg.QueueSize = size
	cfg.Overflow = overflow
	gate := make(chan struct{})
	w, err := newWriter(cfg, nil, writerHooks{gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
		w.Close()
	})
	return w, cfg, gate
}

// Held reservations fill the queue: with overflow deny a plain Log (and
// another Reserve) is refused at once, though nothing is queued.
func TestReservationsFillQueue(t *testing.T) {
	w, _, _ := newGatedWriter(t, 4, OverflowDeny)
	var held []Reservation
	for range 4 {
		res, err := w.Reserve()
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		held = append(held, res)
	}
	if err := w.Log(sampleRecord(1)); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Log with every place reserved: got %v, want ErrOverflow", err)
	}
	if _, err := w.Reserve(); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Reserve with every place reserved: got %v, want ErrOverflow", err)
	}
	if st := w.Stats(); st.Reserved != 4 || st.Queued != 0 || st.ReserveRefused != 1 {
		t.Fatalf("stats: got %+v, want 4 reserved, 0 queued, 1 reserve refused", st)
	}
	for _, res := range held {
		res.Cancel()
	}
}

// A record logged through a reservation is accepted even when plain Logs
// have filled the rest of the queue, and it reaches the file.
func TestReservationLogWhenQueueFull(t *testing.T) {
	w, cfg, gate := newGatedWriter(t, 3, OverflowDeny)
	res, err := w.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for i := range 10 {
		if err := w.Log(sampleRecord(i)); err != nil {
			if !errors.Is(err, ErrOverflow) {
				t.Fatalf("Log: got %v, want nil or ErrOverflow", err)
			}
			break
		}
		accepted++
	}
	// The writer took one item and waits at the gate: 2 or 3 plain records fit
	// beside the reservation.
	if accepted < 2 || accepted > 3 {
		t.Fatalf("accepted %d plain records, want 2 or 3", accepted)
	}
	rec := sampleRecord(99)
	rec.ID = "reserved-1"
	if err := res.Log(rec); err != nil {
		t.Fatalf("Log through the reservation with the queue full: got %v, want nil", err)
	}
	if err := res.Log(rec); !errors.Is(err, errReservationUsed) {
		t.Fatalf("second Log through one reservation: got %v, want errReservationUsed", err)
	}
	close(gate)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey()}, cfg.File)
	if err != nil || rep.Records != accepted+1 {
		t.Fatalf("verify: got %d records, %v; want %d", rep.Records, err, accepted+1)
	}
	found := false
	for _, l := range readLines(t, cfg.File) {
		if decodeLine(t, l).ID == "reserved-1" {
			found = true
		}
	}
	if !found {
		t.Fatal("the reserved record is not in the file")
	}
}

// Cancel gives the place back (once: a second Cancel does not free another).
func TestReservationCancelReturnsRoom(t *testing.T) {
	w, _, _ := newGatedWriter(t, 2, OverflowDeny)
	a, err := w.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Log(sampleRecord(1)); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Log with both places reserved: got %v, want ErrOverflow", err)
	}
	a.Cancel()
	a.Cancel() // a second Cancel must not free b's place
	if err := a.Log(sampleRecord(2)); !errors.Is(err, errReservationUsed) {
		t.Fatalf("Log after Cancel: got %v, want errReservationUsed", err)
	}
	c, err := w.Reserve()
	if err != nil {
		t.Fatalf("Reserve after Cancel: got %v, want nil", err)
	}
	if _, err := w.Reserve(); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Reserve with b and c held: got %v, want ErrOverflow (a double Cancel freed a place)", err)
	}
	b.Cancel()
	c.Cancel()
}

// With overflow block, Reserve waits for room instead of failing.
func TestReserveBlocksUntilRoom(t *testing.T) {
	w, _, gate := newGatedWriter(t, 1, OverflowBlock)
	if err := w.Log(sampleRecord(1)); err != nil { // taken by the writer, held at the gate
		t.Fatal(err)
	}
	if err := w.Log(sampleRecord(2)); err != nil { // fills the one place
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		res, err := w.Reserve()
		if err == nil {
			err = res.Log(sampleRecord(3))
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Reserve with the queue full returned %v before room was made", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	if err := <-got; err != nil {
		t.Fatalf("Reserve after room was made: %v", err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Written != 3 || st.Overflow == 0 {
		t.Fatalf("stats: got %+v, want 3 written and the wait counted as overflow", st)
	}
}

func TestReserveRefusedAfterClose(t *testing.T) {
	w, _, _ := newGatedWriter(t, 4, OverflowDeny)
	res, err := w.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := res.Log(sampleRecord(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("reservation Log after Close: got %v, want ErrClosed", err)
	}
	if _, err := w.Reserve(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Reserve after Close: got %v, want ErrClosed", err)
	}
}

// Many goroutines reserving, logging, cancelling and logging plainly at once
// (run with -race): every accepted record is in the file once, nothing else
// is, and no place leaks (all of them can be reserved at the end).
func TestReserveConcurrent(t *testing.T) {
	const size, workers, each = 8, 8, 300
	cfg := testConfig(t)
	cfg.QueueSize = size
	cfg.Overflow = OverflowDeny
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				switch (g + i) % 3 {
				case 0: // plain Log
					if w.Log(sampleRecord(i)) == nil {
						accepted.Add(1)
					}
				case 1: // reserve, then log
					res, err := w.Reserve()
					if err != nil {
						continue
					}
					if err := res.Log(sampleRecord(i)); err != nil {
						t.Errorf("reservation Log: %v", err)
						continue
					}
					accepted.Add(1)
				case 2: // reserve, then cancel
					if res, err := w.Reserve(); err == nil {
						res.Cancel()
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	var held []Reservation
	for range size {
		res, err := w.Reserve()
		if err != nil {
			t.Fatalf("Reserve %d of %d on an idle writer: %v (a place leaked)", len(held)+1, size, err)
		}
		held = append(held, res)
	}
	for _, res := range held {
		res.Cancel()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey()}, cfg.File)
	if err != nil || int64(rep.Records) != accepted.Load() {
		t.Fatalf("verify: got %d records, %v; want %d", rep.Records, err, accepted.Load())
	}
}

// Observed passes Reserve through and its Tally counts the reserved record
// once it is logged.
func TestObservedReserve(t *testing.T) {
	w, cfg, gate := newGatedWriter(t, 1, OverflowDeny)
	tl := NewTally()
	o := Observe(w, tl)
	res, err := o.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Log(sampleRecord(1)); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Log through Observed with its one place reserved: got %v, want ErrOverflow", err)
	}
	if err := res.Log(&Record{Kind: KindConnect, Decision: DecisionAllow, Host: "pypi.org", Port: 443}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rows := tl.Rows()
	var allowed int
	for _, r := range rows {
		if r.Decision == DecisionAllow && r.Host == "pypi.org" {
			allowed += r.Count
		}
	}
	if allowed != 1 {
		t.Fatalf("tally rows %+v: got %d allowed pypi.org, want 1", rows, allowed)
	}
	if rep, err := VerifyFiles(VerifyOptions{}, cfg.File); err != nil || rep.Records != 1 {
		t.Fatalf("verify: got %d records, %v; want 1", rep.Records, err)
	}
}

// Regression: with overflow block, Close while a Reserve waited for room held
// by another reservation deadlocked: the waiter held the writer's read lock,
// Close waited for it, and the holder's Log waited behind Close.
func TestCloseWhileReserveWaits(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueSize = 1
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := w.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() {
		res, err := w.Reserve() // waits: the one place is held
		if err == nil {
			res.Cancel()
		}
		waiter <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); w.Stats().Overflow == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // the waiter is counted just before it waits
			t.Fatal("the second Reserve did not start waiting within 10s")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	time.Sleep(20 * time.Millisecond) // let Close start waiting, if it must
	logged := make(chan error, 1)
	go func() { logged <- held.Log(sampleRecord(1)) }()
	for name, ch := range map[string]chan error{"held reservation's Log": logged, "Close": closed, "waiting Reserve": waiter} {
		select {
		case err := <-ch:
			if name == "Close" && err != nil {
				t.Fatalf("Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still blocked after 10s: deadlock", name)
		}
	}
}
