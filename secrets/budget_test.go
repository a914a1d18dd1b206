package secrets

import (
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/secrets/secretstest"
)

// heldBody is a request body that delivers nothing until released: its scan
// stays in flight, holding its reservation. reading is closed at the first
// Read, that is once the scan has reserved its buffer.
type heldBody struct {
	reading chan struct{}
	once    sync.Once
	release chan struct{}
	data    io.Reader
	reads   int
	mu      sync.Mutex
}

func newHeldBody(data string) *heldBody {
	return &heldBody{reading: make(chan struct{}), release: make(chan struct{}), data: strings.NewReader(data)}
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.once.Do(func() { close(b.reading) })
	<-b.release
	b.mu.Lock()
	b.reads++
	b.mu.Unlock()
	return b.data.Read(p)
}

func (b *heldBody) Close() error { return nil }

func (b *heldBody) readCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reads
}

func bodyReq(t *testing.T, u *secretstest.Upstream, body io.ReadCloser, length int64) *http.Request {
	t.Helper()
	req := mustReq(t, "POST", u.URL("other.example.com", "/upload"), nil)
	req.Body, req.ContentLength = body, length
	return req
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestBodyScanBudgetPerSandbox (with secrets configured, each
// request body is buffered up to MaxBodyScan before policy, with no bound per
// sandbox): scans from one sandbox that together would pass its budget are
// refused with a *BusyError (429, secret_body_scan_busy) without a byte of
// the refused body being read, while another sandbox is still served; the
// budget comes back when the bodies are done.
func TestBodyScanBudgetPerSandbox(t *testing.T) {
	const maxBody, perSandbox = 64 << 10, 256 << 10
	in, u, _ := setup(t, func(c *Config) { c.MaxBodyScan, c.MaxBodyScanPerSandbox = maxBody, perSandbox })
	body := strings.Repeat("a", maxBody)
	// Each announced 64 KiB body reserves 64 KiB + 1: three fit in 256 KiB.
	const fit = perSandbox / (maxBody + 1)
	type result struct {
		req *http.Request
		err error
	}
	var held []*heldBody
	results := make(chan result, fit)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, h := range held {
			select {
			case <-h.release:
			default:
				close(h.release)
			}
		}
		wg.Wait()
	})
	for i := 0; i < fit; i++ {
		h := newHeldBody(body)
		held = append(held, h)
		req := bodyReq(t, u, h, maxBody)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- result{req, in.Check(sb1, req)}
		}()
		waitClosed(t, h.reading, "a scan to start reading")
	}
	if got := in.budget.inUse(sb1.ID); got != fit*(maxBody+1) {
		t.Fatalf("budget in use: got %d, want %d", got, fit*(maxBody+1))
	}

	over := newHeldBody(body)
	close(over.release)
	err := in.Check(sb1, bodyReq(t, u, over, maxBody))
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Code != CodeBodyScanBusy || busy.Sandbox != sb1.ID || HTTPStatus(err) != http.StatusTooManyRequests {
		t.Fatalf("scan past the budget: got %v (status %d), want a *BusyError %s and 429", err, HTTPStatus(err), CodeBodyScanBusy)
	}
	var d *Denial
	if errors.As(err, &d) {
		t.Errorf("a busy refusal must not be a denial: %v", err)
	}
	if n := over.readCount(); n != 0 {
		t.Errorf("refused body: got %d reads, want 0", n)
	}
	chunked := newHeldBody(body)
	close(chunked.release)
	if err := in.Check(sb1, bodyReq(t, u, chunked, -1)); !errors.As(err, &busy) {
		t.Errorf("chunked scan past the budget: got %v, want a *BusyError", err)
	}

	// Another sandbox is served while sb-1's budget is in use.
	other := newHeldBody(body)
	close(other.release)
	req2 := bodyReq(t, u, other, maxBody)
	if err := in.Check(sb2, req2); err != nil {
		t.Fatalf("another sandbox: got %v, want its scan served", err)
	}
	if b, _ := io.ReadAll(req2.Body); len(b) != maxBody {
		t.Errorf("another sandbox's body: got %d bytes, want %d", len(b), maxBody)
	}

	// The held scans finish; their bodies, read to the end, give the budget back.
	for _, h := range held {
		close(h.release)
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil {
			t.Fatalf("held scan: %v", r.err)
		}
		if in.budget.inUse(sb1.ID) == 0 {
			t.Fatal("budget released before the scanned bodies were sent on")
		}
		if b, _ := io.ReadAll(r.req.Body); len(b) != maxBody {
			t.Errorf("scanned body: got %d bytes, want %d", len(b), maxBody)
		}
	}
	if got := in.budget.inUse(sb1.ID); got != 0 {
		t.Errorf("budget in use after the bodies were read: got %d, want 0", got)
	}
	again := newHeldBody(body)
	close(again.release)
	if err := in.Check(sb1, bodyReq(t, u, again, maxBody)); err != nil {
		t.Errorf("after the budget came back: got %v, want served", err)
	}
}

// TestBodyScanBudgetReleasedWhenRequestDropped: a scanned body the gateway
// drops without reading or closing it does not keep the sandbox's budget:
// closing gives it back at once, and a body nobody holds gives it back when
// it is collected.
func TestBodyScanBudgetReleasedWhenRequestDropped(t *testing.T) {
	const maxBody = 64 << 10
	in, u, _ := setup(t, func(c *Config) { c.MaxBodyScan = maxBody })
	body := strings.Repeat("b", 1000)
	req := bodyReq(t, u, io.NopCloser(strings.NewReader(body)), int64(len(body)))
	if err := in.Check(sb1, req); err != nil {
		t.Fatal(err)
	}
	if in.budget.inUse(sb1.ID) == 0 {
		t.Fatal("a scanned body holds no budget: the test proves nothing")
	}
	req.Body.Close()
	if got := in.budget.inUse(sb1.ID); got != 0 {
		t.Errorf("after Close: got %d in use, want 0", got)
	}

	func() {
		req := bodyReq(t, u, io.NopCloser(strings.NewReader(body)), -1)
		if err := in.Check(sb1, req); err != nil {
			t.Fatal(err)
		}
	}() // dropped: never read, never closed
	deadline := time.Now().Add(5 * time.Second)
	for in.budget.inUse(sb1.ID) != 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := in.budget.inUse(sb1.ID); got != 0 {
		t.Errorf("after the dropped request was collected: got %d in use, want 0", got)
	}
}

func TestBodyScanBudgetConfig(t *testing.T) {
	tests := []struct {
		name           string
		maxBody, perSb int64
		want           int64
		wantErr        string
	}{
		{name: "defaults", want: DefaultMaxBodyScanPerSandbox},
		{name: "large max_body_scan", maxBody: 16 << 20, want: 128 << 20},
		{name: "explicit", maxBody: 1 << 20, perSb: 2 << 20, want: 2 << 20},
		{name: "not larger than max_body_scan", maxBody: 1 << 20, perSb: 1 << 20, wantErr: "max_body_scan_per_sandbox"},
		{name: "negative", perSb: -1, wantErr: "max_body_scan_per_sandbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{MaxBodyScan: tt.maxBody, MaxBodyScanPerSandbox: tt.perSb}
			c.applyDefaults()
			err := c.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.MaxBodyScanPerSandbox != tt.want {
				t.Errorf("got %d (%v), want %d", c.MaxBodyScanPerSandbox, err, tt.want)
			}
		})
	}
	if _, err := Parse([]byte("max_body_scan_per_sandbox: 4194304\n")); err != nil {
		t.Errorf("Parse with max_body_scan_per_sandbox: %v", err)
	}
}
