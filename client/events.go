package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// SSE event types of GET /v1/sandboxes/{id}/events.
const (
	EventDecision = "decision" // an audit record of the sandbox
	EventSandbox  = "sandbox"  // a lifecycle change: state, end reason
)

// maxEvent bounds one event's data.
const maxEvent = 4 << 20

// Event is one server-sent event: its type (EventDecision, EventSandbox) and
// data.
type Event struct {
	Type string
	api.Event
}

// EventStream is a sandbox's live events. It does not reconnect: it ends when
// the daemon closes it (the sandbox is gone, the daemon stops) or its context
// ends.
type EventStream struct {
	ctx  context.Context
	id   string
	body io.ReadCloser
	r    *bufio.Reader
	err  error
	once sync.Once
}

// Events opens the events stream of sandbox id. Its first event is the
// sandbox's state now ("sandbox"); it ends after the sandbox has stopped. An
// unknown sandbox is an error here, before any event.
func (c *Client) Events(ctx context.Context, id string) (*EventStream, error) {
	return c.EventsWith(ctx, id, EventsOptions{})
}

// EventsOptions asks the events stream for the sandbox's past records.
type EventsOptions struct {
	// History sends the records the daemon kept of the sandbox (its last
	// few hundred) after the first state, as decision events with History
	// set; the first event's HistoryOmitted counts older ones.
	History bool
	// Since, when set, sends only the kept records at or after it (and
	// implies History).
	Since time.Time
	// NoFollow ends the stream after the first state and the history.
	NoFollow bool
}

// EventsWith is Events with o.
func (c *Client) EventsWith(ctx context.Context, id string, o EventsOptions) (*EventStream, error) {
	q := url.Values{}
	if o.History {
		q.Set("history", "true")
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	if o.NoFollow {
		q.Set("follow", "false")
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(id, "events"), query: q})
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("events %s: content type %q, want text/event-stream", id, ct)
	}
	return &EventStream{ctx: ctx, id: id, body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10)}, nil
}

// Next returns the next event; io.EOF when the daemon ended the stream, the
// context's error when it ended.
func (s *EventStream) Next() (Event, error) {
	if s.err != nil {
		return Event{}, s.err
	}
	ev, err := s.read()
	if err != nil {
		if s.ctx.Err() != nil {
			err = fmt.Errorf("events %s: %w", s.id, s.ctx.Err())
		}
		s.err = err
		return Event{}, err
	}
	return ev, nil
}

// read parses one event (the text/event-stream format): "field: value"
// lines up to a blank line; comments (":") and events without data are
// skipped; data lines are joined with "\n".
func (s *EventStream) read() (Event, error) {
	var typ string
	var data strings.Builder
	for {
		line, err := readLine(s.r, maxEvent)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return Event{}, io.EOF
			}
			return Event{}, fmt.Errorf("events %s: %w", s.id, err)
		}
		if len(line) == 0 {
			if data.Len() == 0 {
				typ = ""
				continue
			}
			return decodeEvent(s.id, typ, data.String())
		}
		field, value, _ := strings.Cut(string(line), ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "": // a comment: ": ping"
		case "event":
			typ = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			if data.Len()+len(value) > maxEvent {
				return Event{}, fmt.Errorf("events %s: an event larger than %d bytes", s.id, maxEvent)
			}
			data.WriteString(value)
		}
	}
}

func decodeEvent(id, typ, data string) (Event, error) {
	if typ == "" {
		typ = "message"
	}
	ev := Event{Type: typ}
	if err := json.Unmarshal([]byte(data), &ev.Event); err != nil {
		return Event{}, fmt.Errorf("events %s: %s event: %w", id, typ, err)
	}
	return ev, nil
}

// All iterates over the events until the stream ends (not yielded) or fails
// (yielded once, last).
func (s *EventStream) All() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			ev, err := s.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Close ends the stream.
func (s *EventStream) Close() error {
	s.once.Do(func() { s.body.Close() })
	return nil
}
