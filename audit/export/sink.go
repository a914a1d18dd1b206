package export

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Sink ships batches of events. Send returns nil only when the collector has
// acknowledged the whole batch (for a file: written and fsynced); on error
// the Shipper sends the same batch again.
type Sink interface {
	Send(ctx context.Context, batch []Event) error
	Close() error
}

// NewSink makes cfg's sink; jsonl and ocsf with no endpoint (or "-") write to
// stdout.
func NewSink(ctx context.Context, cfg Config, stdout io.Writer) (Sink, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	scheme, rest, _ := cfg.endpoint()
	switch cfg.Format {
	case FormatJSONL, FormatOCSF:
		enc := func(e *Event) []byte {
			if e.Gap != nil {
				return gapLine(e.Gap)
			}
			return e.Line
		}
		if cfg.Format == FormatOCSF {
			enc = func(e *Event) []byte { return ocsfEvent(e, cfg.Version) }
		}
		if rest == "" || rest == "-" {
			return &lineSink{w: stdout, enc: enc}, nil
		}
		f, err := os.OpenFile(rest, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("export: %s sink: %w", cfg.Format, err)
		}
		return &lineSink{w: f, f: f, enc: enc, jsonl: cfg.Format == FormatJSONL}, nil
	case FormatSyslog:
		return newSyslogSink(cfg, scheme, rest)
	case FormatOTLP:
		return newOTLPSink(ctx, cfg, scheme, rest)
	}
	return nil, fmt.Errorf("export: format %q is not one of jsonl, ocsf, otlp, syslog", cfg.Format)
}

// lineSink writes one encoded event per line to w; with f, a batch is
// acknowledged once f is fsynced.
type lineSink struct {
	w     io.Writer
	f     *os.File
	enc   func(*Event) []byte
	jsonl bool // f holds the records themselves: it knows where shipping stands
}

// resumer is a sink that knows the last record it holds, which may be past
// the state file's position (a crash between its write and the state write).
type resumer interface {
	resume() (Position, error)
}

// resume reads a JSONL file sink's last line: the position after it. A
// crash after the fsync and before the state write then repeats nothing.
func (s *lineSink) resume() (Position, error) {
	if !s.jsonl {
		return Position{}, nil
	}
	line, err := lastLine(s.f.Name())
	if err != nil || line == nil {
		return Position{}, err
	}
	var g struct {
		Kind    string `json:"kind"`
		Through uint64 `json:"through_seq"`
	}
	if json.Unmarshal(line, &g) == nil && g.Kind == GapKind {
		return Position{Seq: g.Through}, nil
	}
	e, err := newEvent(line)
	if err != nil {
		return Position{}, fmt.Errorf("export: %s: last line: %w", s.f.Name(), err)
	}
	return Position{Seq: e.Record.Seq, Hash: e.Hash}, nil
}

func (s *lineSink) Send(_ context.Context, batch []Event) error {
	bw := bufio.NewWriter(s.w)
	for i := range batch {
		bw.Write(s.enc(&batch[i]))
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("export: write: %w", err)
	}
	if s.f != nil {
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("export: sync: %w", err)
		}
	}
	return nil
}

func (s *lineSink) Close() error {
	if s.f != nil {
		return s.f.Close()
	}
	return nil
}
