package budget

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBucket(10, 5, t0) // one token per 100 ms, burst 5
	steps := []struct {
		name string
		at   time.Duration
		n    int // takes at this instant
		want int // how many succeed
	}{
		{"burst at start", 0, 7, 5},
		{"half a token later", 50 * time.Millisecond, 1, 0},
		{"one token later", 100 * time.Millisecond, 2, 1},
		{"a long pause refills to the burst, not beyond", time.Hour, 9, 5},
		{"then one per interval", time.Hour + 100*time.Millisecond, 3, 1},
	}
	for _, st := range steps {
		got := 0
		for range st.n {
			if b.Take(t0.Add(st.at)) {
				got++
			}
		}
		if got != st.want {
			t.Errorf("%s: got %d allowed, want %d", st.name, got, st.want)
		}
	}
}

func TestBucketConcurrentTakes(t *testing.T) {
	// Many goroutines at one instant: exactly the burst wins, never more.
	t0 := time.Unix(1000, 0)
	b := NewBucket(1, 100, t0)
	var mu sync.Mutex
	won := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			n := 0
			for range 1000 {
				if b.Take(t0) {
					n++
				}
			}
			mu.Lock()
			won += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if won != 100 {
		t.Errorf("got %d takes, want exactly the burst (100)", won)
	}
}

var testFields = Fields{Count: "events", Distinct: "distinct_names", Top: "top_names", Item: "name"}

// decoded is a summary's extra fields as a reader sees them.
type decoded struct {
	Events   int            `json:"events"`
	ByKind   map[string]int `json:"by_kind"`
	Distinct int            `json:"distinct_names"`
	Capped   bool           `json:"distinct_names_capped"`
	Top      []struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
	} `json:"top_names"`
	Hits        *int   `json:"hits"`
	WindowStart string `json:"window_start"`
	WindowMS    *int64 `json:"window_ms"`
	Final       bool   `json:"final"`
}

func decode(t *testing.T, extra map[string]json.RawMessage) decoded {
	t.Helper()
	b, err := json.Marshal(extra)
	if err != nil {
		t.Fatal(err)
	}
	var d decoded
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("summary fields %s: %v", b, err)
	}
	return d
}

// TestSummaryBounded: a window's memory is bounded whatever a sandbox sends.
func TestSummaryBounded(t *testing.T) {
	s := NewSummary(time.Unix(0, 0))
	const n = MaxNames + 500
	for i := range n {
		s.N++
		s.Count("by_kind", fmt.Sprintf("k%d", i), 1)
		s.AddName(fmt.Sprintf("n%d.example.com", i), 1)
	}
	if len(s.Names) != MaxNames || !s.NamesCapped {
		t.Errorf("names: got %d capped=%v, want %d capped", len(s.Names), s.NamesCapped, MaxNames)
	}
	if got := s.By["by_kind"]; len(got) != MaxKeys+1 || got[OtherKey] != n-MaxKeys {
		t.Errorf("by_kind: got %d keys, other=%d; want %d keys with the rest under %s", len(got), got[OtherKey], MaxKeys+1, OtherKey)
	}
	s.End = s.Start.Add(1500 * time.Millisecond)
	d := decode(t, s.Extra(testFields, 5, true))
	if d.Events != n || d.Distinct != MaxNames || !d.Capped || len(d.Top) != 5 || !d.Final {
		t.Errorf("extra: got %+v", d)
	}
	if d.WindowMS == nil || *d.WindowMS != 1500 || d.WindowStart != "1970-01-01T00:00:00Z" {
		t.Errorf("window: got start %q ms %v, want 1970-01-01T00:00:00Z and 1500", d.WindowStart, d.WindowMS)
	}
}

func TestSummaryExtra(t *testing.T) {
	s := NewSummary(time.Unix(0, 0))
	for _, name := range []string{"b.example", "a.example", "b.example", "c.example", "", "b.example", "a.example"} {
		s.N++
		s.AddName(name, 1)
		s.Total("hits", 0)
	}
	s.End = s.Start
	d := decode(t, s.Extra(testFields, 2, false))
	if len(d.Top) != 2 || d.Top[0].Name != "b.example" || d.Top[0].Count != 3 || d.Top[1].Name != "a.example" || d.Top[1].Count != 2 {
		t.Errorf("top: got %+v, want b.example x3 then a.example x2", d.Top)
	}
	if d.Distinct != 3 || d.Capped || d.Final {
		t.Errorf("got distinct %d capped %v final %v, want 3, false, false", d.Distinct, d.Capped, d.Final)
	}
	if d.ByKind != nil {
		t.Errorf("an empty count is written: got by_kind %v, want none", d.ByKind)
	}
	if d.Hits == nil || *d.Hits != 0 {
		t.Errorf("a zero total: got %v, want written as 0", d.Hits)
	}
	// A name that needs escaping stays one JSON string.
	s.AddName(`q"}],"x":{"`, 9)
	if d := decode(t, s.Extra(testFields, 1, false)); d.Top[0].Name != `q"}],"x":{"` {
		t.Errorf("escaped name: got %q", d.Top[0].Name)
	}
}

func TestSummaryMerge(t *testing.T) {
	a, b := NewSummary(time.Unix(10, 0)), NewSummary(time.Unix(5, 0))
	a.N, b.N = 2, 3
	a.Count("by_kind", "http", 2)
	b.Count("by_kind", "http", 1)
	b.Count("by_kind", "dns", 2)
	a.Total("hits", 1)
	b.Total("hits", 2)
	b.AddName("x", 3)
	b.NamesCapped = true
	a.Merge(b)
	if a.N != 5 || a.By["by_kind"]["http"] != 3 || a.By["by_kind"]["dns"] != 2 || a.Totals["hits"] != 3 || a.Names["x"] != 3 || !a.NamesCapped {
		t.Errorf("merged: got %+v", a)
	}
	if !a.Start.Equal(time.Unix(5, 0)) {
		t.Errorf("start: got %v, want the earlier window's", a.Start)
	}
}

// recorder is a Meter's Write and Lost, counting what they were given.
type recorder struct {
	mu      sync.Mutex
	fail    bool
	written []int // N of each summary written
	finals  int
	lost    int
	windows int
}

func (r *recorder) hooks() Hooks {
	return Hooks{
		Write: func(s *Summary, final bool) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.fail {
				return errors.New("refused")
			}
			r.written = append(r.written, s.N)
			if final {
				r.finals++
			}
			return nil
		},
		Lost: func(s *Summary, _ error) {
			r.mu.Lock()
			r.lost += s.N
			r.mu.Unlock()
		},
		Windows: func(d int) {
			r.mu.Lock()
			r.windows += d
			r.mu.Unlock()
		},
	}
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.lost
	for _, w := range r.written {
		n += w
	}
	return n
}

// TestMeterCountsEveryEventOnce: every event past the bucket is in exactly
// one summary, including those of a window whose write was refused (carried
// on) and the final one.
func TestMeterCountsEveryEventOnce(t *testing.T) {
	rec := &recorder{fail: true}
	m := NewMeter(1, 1, time.Hour, rec.hooks(), time.Now())
	if !m.Allow(time.Now()) {
		t.Fatal("the first event did not fit a burst of 1")
	}
	for range 3 {
		if m.Allow(time.Now()) {
			t.Fatal("an event past the burst fit")
		}
		if !m.Count(func(s *Summary) { s.Count("by_kind", "http", 1) }) {
			t.Fatal("Count on an open meter refused")
		}
	}
	if !m.Open() || rec.windows != 1 {
		t.Fatalf("got open %v windows %d, want one open window", m.Open(), rec.windows)
	}
	m.flushDue() // the interval ends; the write is refused: carried on
	if !m.Open() || len(rec.written) != 0 {
		t.Fatalf("a refused summary was not carried on: open %v written %v", m.Open(), rec.written)
	}
	m.Count(func(*Summary) {})
	rec.mu.Lock()
	rec.fail = false
	rec.mu.Unlock()
	m.Close()
	if len(rec.written) != 1 || rec.written[0] != 4 || rec.finals != 1 || rec.windows != 0 {
		t.Errorf("got written %v finals %d windows %d, want one final summary of 4 and no window open", rec.written, rec.finals, rec.windows)
	}
	if m.Count(func(*Summary) {}) {
		t.Error("Count after Close: got true, want false (the caller writes its own record)")
	}
}

// TestMeterLostAfterClose: a final summary that cannot be written goes to
// Lost, not away.
func TestMeterLostAfterClose(t *testing.T) {
	rec := &recorder{fail: true}
	m := NewMeter(1, 1, time.Hour, rec.hooks(), time.Now())
	for range 5 {
		m.Count(func(*Summary) {})
	}
	m.Close()
	if rec.lost != 5 || rec.total() != 5 {
		t.Errorf("got lost %d, want the 5 counted", rec.lost)
	}
}

// TestMeterConcurrent: under concurrent counting with timers firing, every
// event is counted exactly once.
func TestMeterConcurrent(t *testing.T) {
	rec := &recorder{}
	m := NewMeter(1, 1, time.Millisecond, rec.hooks(), time.Now())
	const workers, each = 4, 500
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				m.Count(func(s *Summary) { s.Total("hits", 1) })
			}
		})
	}
	wg.Wait()
	m.Close()
	if got := rec.total(); got != workers*each {
		t.Errorf("got %d counted, want %d", got, workers*each)
	}
}
