package export

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// SyslogFacility is the RFC 5424 facility of every message: 13, log audit.
const SyslogFacility = 13

// SyslogSDID is the structured-data element carrying the airlock fields
// (32473 is the private enterprise number RFC 5612 reserves for examples
// and documentation).
const SyslogSDID = "airlock@32473"

// syslogSink writes RFC 5424 messages, octet-counted (RFC 6587), over one
// TCP or TLS connection, redialled after any failure.
type syslogSink struct {
	cfg     Config
	addr    string
	tlsCfg  *tls.Config // nil: plain TCP
	conn    net.Conn
	host    string
	probe   [1]byte
	nowFunc func() time.Time
}

func newSyslogSink(cfg Config, scheme, endpoint string) (*syslogSink, error) {
	u, _ := url.Parse(endpoint)
	s := &syslogSink{cfg: cfg, addr: u.Host, host: cfg.Hostname, nowFunc: time.Now}
	if s.host == "" {
		s.host, _ = os.Hostname()
	}
	if s.host == "" {
		s.host = "-"
	}
	if scheme == "tls" {
		tc, err := cfg.TLS.tlsConfig()
		if err != nil {
			return nil, err
		}
		if tc.ServerName == "" {
			tc.ServerName = u.Hostname()
		}
		s.tlsCfg = tc
	}
	return s, nil
}

// Send writes the batch. TCP syslog has no application acknowledgement: a
// batch counts as shipped once the kernel accepted every byte. Before each
// batch the connection is probed for a collector that closed it, so a batch
// is not written into a connection the collector already left.
func (s *syslogSink) Send(ctx context.Context, batch []Event) error {
	if s.conn != nil && !s.alive() {
		s.drop()
	}
	if s.conn == nil {
		if err := s.dial(ctx); err != nil {
			return err
		}
	}
	var buf []byte
	for i := range batch {
		msg := s.message(&batch[i])
		buf = strconv.AppendInt(buf, int64(len(msg)), 10)
		buf = append(buf, ' ')
		buf = append(buf, msg...)
	}
	deadline := time.Now().Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	s.conn.SetWriteDeadline(deadline)
	if _, err := s.conn.Write(buf); err != nil {
		s.drop()
		return fmt.Errorf("export: syslog %s: %w", s.addr, err)
	}
	return nil
}

func (s *syslogSink) dial(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("export: syslog: %w", err)
	}
	if s.tlsCfg != nil {
		tc := tls.Client(c, s.tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return fmt.Errorf("export: syslog tls %s: %w", s.addr, err)
		}
		c = tc
	}
	s.conn = c
	return nil
}

// alive reports whether the collector still holds the connection open: a
// collector never writes to it, so a read that does not time out at once
// means it closed (or broke) it.
func (s *syslogSink) alive() bool {
	s.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := s.conn.Read(s.probe[:])
	s.conn.SetReadDeadline(time.Time{})
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (s *syslogSink) drop() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

func (s *syslogSink) Close() error {
	s.drop()
	return nil
}

// syslogSeverity maps an event's level to RFC 5424 severities.
var syslogSeverity = map[level]int{levelInfo: 6, levelWarn: 4, levelError: 3, levelCritical: 2}

// message is one RFC 5424 message: PRI by decision, the record's time,
// HOSTNAME its node (the sink's host name for a record without one), MSGID
// its kind, the airlock fields as structured data, and the record's
// line (UTF-8, BOM first) as MSG.
func (s *syslogSink) message(e *Event) []byte {
	pri := SyslogFacility*8 + syslogSeverity[levelOf(e)]
	ts, msgid, body, host := e.Record.TS.UTC(), sdName(e.Record.Kind, 32), e.Line, s.host
	if e.Record.Node != "" {
		host = e.Record.Node // the machine whose writer wrote the record
	}
	if e.Gap != nil {
		ts, msgid, body = s.nowFunc().UTC(), GapKind, gapLine(e.Gap)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<%d>1 %s %s airlock - %s [%s", pri, ts.Format("2006-01-02T15:04:05.000000Z07:00"), sdName(host, 255), msgid, SyslogSDID)
	for _, f := range fields(e) {
		b.WriteString(" " + sdName(f.Key, 32) + `="`)
		b.WriteString(sdEscape(fieldString(f.Value)))
		b.WriteByte('"')
	}
	b.WriteString("] \xef\xbb\xbf")
	b.Write(body)
	return []byte(b.String())
}

func fieldString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case []string:
		return strings.Join(v, ",")
	}
	return fmt.Sprint(v)
}

// sdEscape escapes '"', '\' and ']' in a PARAM-VALUE (RFC 5424 6.3.3).
func sdEscape(s string) string {
	if !strings.ContainsAny(s, `\"]`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '"' || c == ']' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sdName keeps a HOSTNAME, MSGID or PARAM-NAME to printable US-ASCII without
// space, '=', ']' or '"', at most max characters ("-" when empty).
func sdName(s string, max int) string {
	out := []byte(s)
	for i, c := range out {
		if c < 33 || c > 126 || c == '=' || c == ']' || c == '"' {
			out[i] = '_'
		}
	}
	if len(out) > max {
		out = out[:max]
	}
	if len(out) == 0 {
		return "-"
	}
	return string(out)
}
