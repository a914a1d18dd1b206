package netns

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/oplog"
)

// Audit reason ids for drop records.
const (
	ReasonDrop        = "netns_drop"
	ReasonDropSummary = "netns_drop_summary"
)

// dropLimiter lets burst records through per interval and counts the rest.
type dropLimiter struct {
	burst    int
	interval time.Duration

	start      time.Time
	n          int
	suppressed int
	byProto    map[string]int
}

// allow reports whether one more drop at now may be written individually. When a
// window closes with suppressed drops, summary returns them first.
func (l *dropLimiter) allow(now time.Time, proto string) bool {
	if l.start.IsZero() || now.Sub(l.start) >= l.interval {
		l.start = now
		l.n = 0
	}
	if l.n < l.burst {
		l.n++
		return true
	}
	l.suppressed++
	if l.byProto == nil {
		l.byProto = map[string]int{}
	}
	l.byProto[proto]++
	return false
}

// due reports whether there is a summary to write at now, and when one will be due.
func (l *dropLimiter) due(now time.Time) (bool, time.Time) {
	if l.suppressed == 0 {
		return false, time.Time{}
	}
	end := l.start.Add(l.interval)
	return !now.Before(end), end
}

// take returns and clears the suppressed counts.
func (l *dropLimiter) take() (int, map[string]int) {
	n, by := l.suppressed, l.byProto
	l.suppressed, l.byProto = 0, nil
	return n, by
}

// dropReader turns one sandbox's NFLOG messages into audit records, and
// counts the inbound connections InboundAccept logged as accepted.
type dropReader struct {
	conn     *nflogConn
	sb       identity.Sandbox
	audit    audit.Logger
	log      *slog.Logger
	lim      dropLimiter
	accepted func() // called once per accepted inbound connection
	done     chan struct{}
}

func newDropReader(conn *nflogConn, sb identity.Sandbox, al audit.Logger, log *slog.Logger, burst int, interval time.Duration, accepted func()) *dropReader {
	d := &dropReader{
		conn:     conn,
		sb:       sb,
		audit:    al,
		log:      log,
		lim:      dropLimiter{burst: burst, interval: interval},
		accepted: accepted,
		done:     make(chan struct{}),
	}
	go d.run()
	return d
}

// Close stops the reader, writes any pending summary and waits for it to exit.
func (d *dropReader) Close() {
	d.conn.Close()
	<-d.done
}

func (d *dropReader) run() {
	defer close(d.done)
	buf := make([]byte, 16<<10)
	for {
		_, end := d.lim.due(time.Now())
		_ = d.conn.SetReadDeadline(end)
		pkts, err := d.conn.Read(buf)
		now := time.Now()
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				d.summary(now)
				continue
			case errors.Is(err, os.ErrClosed):
				d.flush()
				return
			default:
				// ENOBUFS: the kernel dropped log messages because we were slow.
				// The packets were still dropped; count what we can and go on.
				d.log.Warn("nflog read", oplog.SandboxKey, d.sb.ID, oplog.ErrorKey, err)
				if errors.Is(err, unix.ENOBUFS) {
					d.lim.allow(now, "unknown")
					continue
				}
				d.flush()
				return
			}
		}
		for _, p := range pkts {
			if p.Prefix == prefixInbound {
				d.accepted()
				continue
			}
			if due, _ := d.lim.due(now); due {
				d.summary(now)
			}
			if d.lim.allow(now, p.Protocol) {
				d.write(d.record(p))
			}
		}
	}
}

func (d *dropReader) summary(now time.Time) {
	if due, _ := d.lim.due(now); due {
		d.flush()
	}
}

func (d *dropReader) flush() {
	n, by := d.lim.take()
	if n == 0 {
		return
	}
	extra := map[string]json.RawMessage{}
	extra[audit.SummarySuppressedKey], _ = json.Marshal(n)
	extra["by_protocol"], _ = json.Marshal(by)
	extra["window_ms"], _ = json.Marshal(d.lim.interval.Milliseconds())
	d.write(&audit.Record{
		ID:       newRecordID(),
		Sandbox:  d.sb.ID,
		Kind:     audit.KindDrop,
		Decision: audit.DecisionDeny,
		Mode:     string(identity.ModeEnforce),
		Reasons:  []audit.Reason{{ID: ReasonDropSummary, Msg: fmt.Sprintf("%d more dropped packets not logged one by one", n)}},
		Extra:    extra,
	})
}

func (d *dropReader) record(p droppedPacket) *audit.Record {
	r := &audit.Record{
		ID:       newRecordID(),
		Sandbox:  d.sb.ID,
		Kind:     audit.KindDrop,
		Decision: audit.DecisionDeny,
		Mode:     string(identity.ModeEnforce),
		Reasons:  []audit.Reason{{ID: ReasonDrop, Msg: "packet dropped by the sandbox network rules"}},
		Protocol: p.Protocol,
		IP:       p.Dst.String(),
		Port:     p.Port,
		Extra:    map[string]json.RawMessage{},
	}
	r.Extra["chain"], _ = json.Marshal(strings.TrimPrefix(p.Prefix, "airlock-"))
	if p.Protocol == "icmp" {
		r.Extra["icmp_type"], _ = json.Marshal(p.ICMPType)
	}
	return r
}

func (d *dropReader) write(r *audit.Record) {
	if d.audit == nil {
		return
	}
	if err := d.audit.Log(r); err != nil {
		d.log.Error("audit drop record", oplog.SandboxKey, d.sb.ID, oplog.ErrorKey, err)
	}
}

// newRecordID returns a random 128-bit hex id for an audit record.
func newRecordID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
