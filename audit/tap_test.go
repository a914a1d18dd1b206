package audit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
)

// drain takes what is buffered in s without waiting.
func drain(s *audit.Subscription) []audit.Record {
	var out []audit.Record
	for {
		select {
		case r, ok := <-s.C():
			if !ok {
				return out
			}
			out = append(out, r)
		default:
			return out
		}
	}
}

func TestTapDeliversBySandbox(t *testing.T) {
	next := &audittest.Log{}
	tap := audit.NewTap()
	lg := audit.Observe(next, tap)
	a := tap.Subscribe("sb-a", 10)
	defer a.Close()
	a2 := tap.Subscribe("sb-a", 10)
	defer a2.Close()
	b := tap.Subscribe("sb-b", 10)
	defer b.Close()
	for _, r := range []audit.Record{
		{ID: "1", Sandbox: "sb-a", Kind: audit.KindHTTP, Host: "pypi.org"},
		{ID: "2", Sandbox: "sb-b", Kind: audit.KindDNS},
		{ID: "3", Sandbox: "sb-c", Kind: audit.KindTCP},
		{ID: "4", Kind: audit.KindExec},
		{ID: "5", Sandbox: "sb-a", Kind: audit.KindConnect, Owner: "1000"},
	} {
		if err := lg.Log(&r); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(rs []audit.Record) (s string) {
		for _, r := range rs {
			s += r.ID
		}
		return s
	}
	if got := ids(drain(a)); got != "15" {
		t.Fatalf("sb-a: got %q, want 15", got)
	}
	if got := ids(drain(a2)); got != "15" {
		t.Fatalf("second sb-a subscriber: got %q, want 15", got)
	}
	if got := ids(drain(b)); got != "2" {
		t.Fatalf("sb-b: got %q, want 2", got)
	}
	if n := len(next.Records()); n != 5 {
		t.Fatalf("next got %d records, want all 5", n)
	}
}

// TestTapDeliversOnlyAccepted: a record the next logger refused never
// reaches a subscriber, and the refusal reaches the caller.
func TestTapDeliversOnlyAccepted(t *testing.T) {
	next := &audittest.Log{}
	tap := audit.NewTap()
	lg := audit.Observe(next, tap)
	s := tap.Subscribe("sb-a", 10)
	defer s.Close()
	next.Refuse(func(r *audit.Record) error {
		if r.ID == "refused" {
			return audit.ErrOverflow
		}
		return nil
	})
	if err := lg.Log(&audit.Record{ID: "refused", Sandbox: "sb-a", Kind: audit.KindHTTP}); !errors.Is(err, audit.ErrOverflow) {
		t.Fatalf("got %v, want the next logger's refusal", err)
	}
	lg.Log(&audit.Record{ID: "ok", Sandbox: "sb-a", Kind: audit.KindHTTP})
	broken := errors.New("disk full")
	next.Break(broken)
	if err := lg.Err(); !errors.Is(err, broken) {
		t.Fatalf("Err: got %v, want the next logger's", err)
	}
	if err := lg.Log(&audit.Record{ID: "while-broken", Sandbox: "sb-a", Kind: audit.KindHTTP}); !errors.Is(err, broken) {
		t.Fatalf("got %v, want %v", err, broken)
	}
	if got := drain(s); len(got) != 1 || got[0].ID != "ok" {
		t.Fatalf("got %+v, want only the accepted record", got)
	}
}

// TestTapSlowSubscriberNeverBlocks: a subscriber that never reads loses what
// does not fit its buffer, counted, and Log goes on at once.
func TestTapSlowSubscriberNeverBlocks(t *testing.T) {
	next := &audittest.Log{}
	tap := audit.NewTap()
	lg := audit.Observe(next, tap)
	slow := tap.Subscribe("sb-a", 2)
	defer slow.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			lg.Log(&audit.Record{Sandbox: "sb-a", Kind: audit.KindHTTP})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Log blocked on a subscriber that does not read")
	}
	if got := len(drain(slow)); got != 2 || slow.Dropped() != 998 {
		t.Fatalf("got %d delivered, %d dropped, want 2 and 998", got, slow.Dropped())
	}
	if n := len(next.Records()); n != 1000 {
		t.Fatalf("next got %d records, want 1000", n)
	}
}

func TestTapReservations(t *testing.T) {
	next := &audittest.Log{}
	tap := audit.NewTap()
	lg := audit.Observe(next, tap)
	s := tap.Subscribe("sb-a", 10)
	defer s.Close()
	res, err := lg.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if got := drain(s); len(got) != 0 {
		t.Fatalf("got %+v before the reservation was used, want nothing", got)
	}
	if err := res.Log(&audit.Record{ID: "r", Sandbox: "sb-a", Kind: audit.KindHTTP}); err != nil {
		t.Fatal(err)
	}
	cancelled, _ := lg.Reserve()
	cancelled.Cancel()
	if got := drain(s); len(got) != 1 || got[0].ID != "r" || !next.Reserved("r", audit.KindHTTP) {
		t.Fatalf("got %+v, want the reserved record, written through the next reservation", got)
	}
	if r := next.Reservations(); r.Taken != 2 || r.Logged != 1 || r.Cancelled != 1 {
		t.Fatalf("got %+v, want 2 taken, 1 logged, 1 cancelled", r)
	}
	next.RefuseRoom(audit.ErrOverflow)
	if _, err := lg.Reserve(); !errors.Is(err, audit.ErrOverflow) {
		t.Fatalf("got %v, want the next logger's refusal", err)
	}
	if _, err := audit.Observe(audittest.Discard{}, audit.NewTap()).Reserve(); err == nil {
		t.Fatal("got a reservation from a logger that cannot reserve, want an error")
	}
}

// TestTapRedacts: a subscriber sees a record as the file would hold it:
// credential values in extra and query values in the path are gone.
func TestTapRedacts(t *testing.T) {
	tap := audit.NewTap()
	lg := audit.Observe(&audittest.Log{}, tap)
	s := tap.Subscribe("sb-a", 10)
	defer s.Close()
	in := &audit.Record{Sandbox: "sb-a", Kind: audit.KindHTTP, Path: "/x?token=s3cret&a=1",
		Extra: map[string]json.RawMessage{"headers": json.RawMessage(`{"Authorization":"Bearer s3cret","Accept":"*/*"}`)}}
	if err := lg.Log(in); err != nil {
		t.Fatal(err)
	}
	got := drain(s)
	if len(got) != 1 {
		t.Fatalf("got %d records, want 1", len(got))
	}
	r := got[0]
	if r.Path != "/x" || len(r.Query) != 2 || string(r.Extra["headers"]) != `{"Accept":"*/*","Authorization":"[REDACTED]"}` || r.TS.IsZero() {
		t.Fatalf("got %+v (extra %s), want the path without its query, the credential redacted, a time", r, r.Extra["headers"])
	}
	if in.Path != "/x?token=s3cret&a=1" {
		t.Fatalf("the caller's record was changed: %+v", in)
	}
}

// TestTapCloseWhileLogging: Close under concurrent Log never panics (no send
// on a closed channel) and closes C once.
func TestTapCloseWhileLogging(t *testing.T) {
	tap := audit.NewTap()
	lg := audit.Observe(&audittest.Log{}, tap)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				lg.Log(&audit.Record{Sandbox: "sb-a", Kind: audit.KindHTTP})
			}
		}()
	}
	for range 200 {
		s := tap.Subscribe("sb-a", 1)
		s.Close()
		s.Close()
		if _, ok := <-s.C(); ok {
			// A record buffered before Close may still be read; then it ends.
			if _, ok := <-s.C(); ok {
				t.Fatal("got a second record after Close")
			}
		}
	}
	close(stop)
	wg.Wait()
}

// TestTapThroughWriter: with the real writer behind it, a subscriber gets
// exactly the records the file holds, in order (kinds and ids), and none the
// writer refused after Close.
func TestTapThroughWriter(t *testing.T) {
	dir := t.TempDir()
	w, err := audit.New(audit.Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(dir, "audit.key")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tap := audit.NewTap()
	lg := audit.Observe(w, tap)
	s := tap.Subscribe("sb-a", 100)
	defer s.Close()
	for i := range 20 {
		sb := "sb-a"
		if i%2 == 1 {
			sb = "sb-b"
		}
		if err := lg.Log(&audit.Record{ID: string(rune('a' + i)), Sandbox: sb, Owner: "1000", Kind: audit.KindHTTP}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lg.Log(&audit.Record{ID: "late", Sandbox: "sb-a", Kind: audit.KindHTTP}); !errors.Is(err, audit.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	var want []string
	for _, r := range audittest.ReadLog(t, filepath.Join(dir, "audit.jsonl")) {
		if r.Sandbox == "sb-a" {
			want = append(want, r.ID+"/"+r.Owner)
		}
	}
	var got []string
	for _, r := range drain(s) {
		got = append(got, r.ID+"/"+r.Owner)
	}
	if len(got) != 10 || len(want) != 10 {
		t.Fatalf("got %v, file holds %v, want 10 each", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %v, file holds %v", got, want)
		}
	}
}

// TestTapHistoryBounded: the records kept for a sandbox are its last ones,
// at most the count and the bytes given; older ones are counted as omitted;
// another sandbox's records and those of a sandbox not kept are not kept;
// SubscribeHistory splits history and live records without a gap or a
// duplicate; Forget frees them.
func TestTapHistoryBounded(t *testing.T) {
	tap := audit.NewTap()
	lg := audit.Observe(new(audittest.Log), tap)
	tap.Keep("sb-a", 3, 1<<20)
	tap.Keep("sb-b", 100, 600) // room for about three of these records
	for i := range 10 {
		for _, sb := range []string{"sb-a", "sb-b", "sb-c"} {
			if err := lg.Log(&audit.Record{Sandbox: sb, Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: fmt.Sprintf("h%d.example", i), Port: 80}); err != nil {
				t.Fatal(err)
			}
		}
	}
	hosts := func(recs []audit.Record) string {
		var hs []string
		for _, r := range recs {
			hs = append(hs, r.Host)
		}
		return strings.Join(hs, ",")
	}
	sub, recs, omitted := tap.SubscribeHistory("sb-a", 4)
	defer sub.Close()
	if got := hosts(recs); got != "h7.example,h8.example,h9.example" || omitted != 7 {
		t.Errorf("sb-a: got %s, %d omitted; want the last 3, 7 omitted", got, omitted)
	}
	_, recs, omitted = tap.SubscribeHistory("sb-b", 1)
	size := 0
	for i := range recs {
		size += len(audit.AppendJSON(nil, &recs[i]))
	}
	if len(recs) == 0 || size > 600 || int(omitted)+len(recs) != 10 || recs[len(recs)-1].Host != "h9.example" {
		t.Errorf("sb-b: got %d records of %d bytes, %d omitted; want the last ones within 600 bytes", len(recs), size, omitted)
	}
	if _, recs, _ = tap.SubscribeHistory("sb-c", 1); len(recs) != 0 {
		t.Errorf("sb-c (not kept): got %d records", len(recs))
	}
	// After SubscribeHistory, a new record goes to the subscription only.
	_ = lg.Log(&audit.Record{Sandbox: "sb-a", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "live.example"})
	if r := <-sub.C(); r.Host != "live.example" {
		t.Errorf("live: got %s, want live.example", r.Host)
	}
	tap.Forget("sb-a")
	if _, recs, _ = tap.SubscribeHistory("sb-a", 1); len(recs) != 0 {
		t.Errorf("after Forget: got %d records", len(recs))
	}
}
