package audittest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/poll"
)

// WaitLimit bounds Log.Wait.
const WaitLimit = 5 * time.Second

// Log is an in-memory audit log. The zero value accepts every record; Break,
// Refuse and RefuseRoom make it fail as a real writer does. It is safe for
// concurrent use.
type Log struct {
	mu      sync.Mutex
	recs    []audit.Record
	broken  error
	refuse  func(r *audit.Record) error
	noRoom  error
	refused int
	res     Reservations
	viaRes  map[string]bool // id+" "+kind of records written through a reservation
}

var (
	_ audit.Reserver = (*Log)(nil)
	_ audit.Health   = (*Log)(nil)
	_ audit.Logger   = Discard{}
)

// Log keeps a copy of r, unless the log is broken or refuses r.
func (l *Log) Log(r *audit.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.add(r)
}

// add keeps r; l.mu is held.
func (l *Log) add(r *audit.Record) error {
	if l.broken != nil {
		l.refused++
		return l.broken
	}
	if l.refuse != nil {
		if err := l.refuse(r); err != nil {
			l.refused++
			return err
		}
	}
	l.recs = append(l.recs, *r)
	return nil
}

// Err is nil unless Break made the log fail.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.broken
}

// Break makes l behave like a writer whose disk failed: Err reports err and
// Log and Reserve refuse with it. Break(nil) repairs it.
func (l *Log) Break(err error) {
	l.mu.Lock()
	l.broken = err
	l.mu.Unlock()
}

// Refuse makes Log fail with fn's error for every record fn refuses (a full
// queue under overflow deny, one record kind). fn runs with the log locked and
// must not call l. Refuse(nil) accepts every record again.
func (l *Log) Refuse(fn func(r *audit.Record) error) {
	l.mu.Lock()
	l.refuse = fn
	l.mu.Unlock()
}

// Full refuses a record as the writer does when its queue is full under
// overflow deny: Refuse(Full) refuses every record with audit.ErrOverflow.
func Full(*audit.Record) error { return audit.ErrOverflow }

// Refused counts the records Log (or a reservation) refused.
func (l *Log) Refused() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

// Records returns a copy of the records kept, in order.
func (l *Log) Records() []audit.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]audit.Record(nil), l.recs...)
}

// Kind returns the records of one kind (audit.KindDrop, ...).
func (l *Log) Kind(kind string) []audit.Record {
	return l.Match(func(r audit.Record) bool { return r.Kind == kind })
}

// Match returns the records match accepts.
func (l *Log) Match(match func(r audit.Record) bool) []audit.Record {
	var out []audit.Record
	for _, r := range l.Records() {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// Last returns the last record match accepts.
func (l *Log) Last(match func(r audit.Record) bool) (audit.Record, bool) {
	recs := l.Records()
	for i := len(recs) - 1; i >= 0; i-- {
		if match(recs[i]) {
			return recs[i], true
		}
	}
	return audit.Record{}, false
}

// Wait returns the first record match accepts, waiting up to WaitLimit for it
// to be written; it fails t naming what (and listing the records) if none is.
func (l *Log) Wait(t testing.TB, what string, match func(r audit.Record) bool) audit.Record {
	t.Helper()
	var found audit.Record
	ok := func() bool {
		for _, r := range l.Records() {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	}
	if !poll.Within(WaitLimit, ok) {
		t.Fatalf("no audit record %s within %s; have %+v", what, WaitLimit, l.Records())
	}
	return found
}

// Reservations counts what Reserve handed out and how each reservation ended.
type Reservations struct {
	Taken     int // Reserve calls that returned room
	Refused   int // Reserve calls refused (RefuseRoom, Break)
	Logged    int // reservations used to write a record
	Cancelled int // reservations given back
	Reused    int // reservations used a second time (a caller's bug)
}

// Reserve hands out room for one record unless RefuseRoom or Break made the
// log refuse it. The record written through the room goes through Log's
// checks, as the real writer's does.
func (l *Log) Reserve() (audit.Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.noRoom
	if l.broken != nil {
		err = l.broken
	}
	if err != nil {
		l.res.Refused++
		return nil, err
	}
	l.res.Taken++
	return &reservation{l: l}, nil
}

// RefuseRoom makes every Reserve fail with err, as the writer's does when its
// queue is full under overflow deny. RefuseRoom(nil) grants room again.
func (l *Log) RefuseRoom(err error) {
	l.mu.Lock()
	l.noRoom = err
	l.mu.Unlock()
}

// Reservations returns the reservation counts so far.
func (l *Log) Reservations() Reservations {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.res
}

// Reserved reports whether a record with this id and kind was written through
// a reservation.
func (l *Log) Reserved(id, kind string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.viaRes[id+" "+kind]
}

type reservation struct {
	l    *Log
	used bool
}

// end counts one use of r; l.mu is held.
func (r *reservation) end() {
	if r.used {
		r.l.res.Reused++
	}
	r.used = true
}

func (r *reservation) Log(rec *audit.Record) error {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	r.end()
	r.l.res.Logged++
	if r.l.viaRes == nil {
		r.l.viaRes = map[string]bool{}
	}
	r.l.viaRes[rec.ID+" "+rec.Kind] = true
	return r.l.add(rec)
}

func (r *reservation) Cancel() {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	r.end()
	r.l.res.Cancelled++
}

// Discard is an audit.Logger that accepts and drops every record (for
// benchmarks). It is not a Reserver.
type Discard struct{}

// Log drops r.
func (Discard) Log(*audit.Record) error { return nil }

// HasReason reports whether r carries the reason id.
func HasReason(r audit.Record, id string) bool {
	for _, x := range r.Reasons {
		if x.ID == id {
			return true
		}
	}
	return false
}

// ReadFile decodes every line of an audit file. The error wraps the file
// system's (errors.Is(err, fs.ErrNotExist) for a missing file) or names the
// line that is not a record.
func ReadFile(path string) ([]audit.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("%s line %d: %w", path, len(out)+1, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// ReadLog is ReadFile that fails t on any error.
func ReadLog(t testing.TB, path string) []audit.Record {
	t.Helper()
	recs, err := ReadFile(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	return recs
}
