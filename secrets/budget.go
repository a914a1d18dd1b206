package secrets

import (
	"io"
	"runtime"
	"sync"

	"github.com/airlock-dev/airlock/oplog"
)

// scanBudget bounds the request-body bytes one sandbox's scans hold at once
// (Config.MaxBodyScanPerSandbox): what is being read for a scan, and what was
// buffered and travels with its request until the body is read to its end or
// closed. A scan that would pass the bound is refused with a *BusyError before
// it reads a byte more; other sandboxes' budgets are untouched.
type scanBudget struct {
	limit int64
	mu    sync.Mutex
	used  map[string]int64 // sandbox id -> bytes held
}

func newScanBudget(limit int64) *scanBudget {
	return &scanBudget{limit: limit, used: map[string]int64{}}
}

// take reserves n more bytes for sandbox, or reports false when that would
// pass the limit.
func (b *scanBudget) take(sandbox string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used[sandbox]+n > b.limit {
		return false
	}
	b.used[sandbox] += n
	return true
}

func (b *scanBudget) give(sandbox string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used[sandbox] -= n; b.used[sandbox] <= 0 {
		delete(b.used, sandbox)
	}
}

// inUse returns the bytes sandbox holds.
func (b *scanBudget) inUse(sandbox string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used[sandbox]
}

// reservation is what one scan holds. It is given back once: when the body is
// read to its end or closed, or, for a request dropped without either, when
// the body that holds it is garbage collected.
type reservation struct {
	b       *scanBudget
	sandbox string
	mu      sync.Mutex
	n       int64
}

// grow reserves n more bytes.
func (r *reservation) grow(n int64) bool {
	if !r.b.take(r.sandbox, n) {
		return false
	}
	r.mu.Lock()
	r.n += n
	r.mu.Unlock()
	return true
}

// release gives back everything held; later calls do nothing.
func (r *reservation) release() {
	if r == nil {
		return
	}
	r.mu.Lock()
	n := r.n
	r.n = 0
	r.mu.Unlock()
	if n > 0 {
		r.b.give(r.sandbox, n)
	}
}

// scanChunk is the first buffer of a body whose length is not announced; it
// doubles as the body grows, up to MaxBodyScan+1 bytes.
const scanChunk = 32 << 10

// readForScan reads up to max bytes of body into a buffer it reserves for
// from sb's budget as it grows (its capacity is what is reserved). It returns
// a *BusyError when the budget cannot hold the next step, before reading into
// it; the reservation is released on every error.
func (in *Injector) readForScan(sb Sandbox, body io.Reader, contentLength, max int64) ([]byte, *reservation, error) {
	size := min(int64(scanChunk), max)
	if contentLength >= 0 && contentLength < max {
		size = contentLength + 1 // +1 sees the EOF without a second buffer
	}
	res := &reservation{b: in.budget, sandbox: sb.ID}
	if !res.grow(size) {
		return nil, nil, in.busy(sb)
	}
	buf := make([]byte, 0, size)
	for int64(len(buf)) < max {
		if len(buf) == cap(buf) {
			next := min(2*int64(cap(buf)), max)
			if !res.grow(next - int64(cap(buf))) {
				res.release()
				return nil, nil, in.busy(sb)
			}
			buf = append(make([]byte, 0, next), buf...)
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			res.release()
			return nil, nil, err
		}
	}
	return buf, res, nil
}

func (in *Injector) busy(sb Sandbox) error {
	in.log.Warn("secrets refused request: body-scan budget in use", oplog.SandboxKey, sb.ID,
		"limit", in.budget.limit, "in_use", in.budget.inUse(sb.ID))
	return &BusyError{Code: CodeBodyScanBusy, Sandbox: sb.ID, Limit: in.budget.limit}
}

// holdUntilDone ties res to the body guard g: it is released when g's body
// ends or g is closed (bodyGuard does that), and at the latest when g is
// garbage collected, so a request the gateway drops without closing its body
// cannot keep the sandbox's budget.
func holdUntilDone(g *bodyGuard, res *reservation) {
	g.res = res
	runtime.AddCleanup(g, func(r *reservation) { r.release() }, res)
}
