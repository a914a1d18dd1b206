package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
)

// DefaultHeartbeat is how often an idle events stream gets a comment, so
// clients and proxies can tell a quiet stream from a dead one.
const DefaultHeartbeat = 15 * time.Second

// eventBuffer is how many records an events subscriber may fall behind
// before it loses some (counted in Event.Dropped).
const eventBuffer = 1024

// maxEventStreams bounds the events streams open on one sandbox at once:
// each holds eventBuffer records in the daemon.
const maxEventStreams = 4

// SSE event types.
const (
	eventDecision = "decision"
	eventSandbox  = "sandbox"
)

// apiEvents is GET /v1/sandboxes/{id}/events: server-sent events of the
// sandbox's audit records as they are accepted ("decision") and its
// lifecycle changes ("sandbox"), the current state first; the stream ends
// after the sandbox has stopped.
//
// With history=true the sandbox's recent records come after the first
// state, as decision events marked history (the daemon keeps the last
// DefaultHistoryRecords, at most DefaultHistoryBytes of them, while the
// sandbox runs; the first event's history_omitted counts older ones), only
// those at or after since (RFC 3339) when it is given. follow=false ends the
// stream after them.
func (d *Daemon) apiEvents(w http.ResponseWriter, r *http.Request) {
	sb, e := d.visible(r)
	if e != nil {
		writeError(w, e)
		return
	}
	q, e := eventsQueryOf(r)
	if e != nil {
		writeError(w, e)
		return
	}
	sb.touch()
	if e := sb.beginStream(); e != nil {
		writeError(w, e)
		return
	}
	defer sb.endStream()
	sub, past, omitted := d.tap.SubscribeHistory(sb.id, eventBuffer)
	defer sub.Close()
	changes, stop := sb.watch()
	defer stop()
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	first := api.Event{Sandbox: d.sandboxView(sb)}
	if q.history {
		first.HistoryOmitted = omitted
	}
	if sw.event(eventSandbox, first) != nil {
		return
	}
	for i := range past {
		if !q.history || past[i].TS.Before(q.since) {
			continue
		}
		if sw.historyRecord(past[i]) != nil {
			return
		}
	}
	if !q.follow {
		return
	}
	tick := time.NewTicker(d.heartbeat)
	defer tick.Stop()
	for {
		select {
		case rec := <-sub.C():
			if sw.record(rec, sub.Dropped()) != nil {
				return
			}
		case v := <-changes:
			if sw.event(eventSandbox, api.Event{Sandbox: &v}) != nil {
				return
			}
		case <-sb.ended:
			// Every record of the sandbox was logged before it stopped.
		drain:
			for {
				select {
				case rec := <-sub.C():
					if sw.record(rec, sub.Dropped()) != nil {
						return
					}
				default:
					break drain
				}
			}
			_ = sw.event(eventSandbox, api.Event{Sandbox: d.sandboxView(sb), Dropped: sub.Dropped()})
			return
		case <-tick.C:
			if sw.write(": ping\n\n") != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// eventsQuery is GET /v1/sandboxes/{id}/events's parameters.
type eventsQuery struct {
	history, follow bool
	since           time.Time
}

func eventsQueryOf(r *http.Request) (eventsQuery, *api.Error) {
	q := eventsQuery{follow: true}
	v := r.URL.Query()
	var err error
	if s := v.Get("history"); s != "" {
		if q.history, err = strconv.ParseBool(s); err != nil {
			return q, apiErr(api.CodeInvalidField, "history", "history: %.40q is not true or false", s)
		}
	}
	if s := v.Get("follow"); s != "" {
		if q.follow, err = strconv.ParseBool(s); err != nil {
			return q, apiErr(api.CodeInvalidField, "follow", "follow: %.40q is not true or false", s)
		}
	}
	if s := v.Get("since"); s != "" {
		if q.since, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return q, apiErr(api.CodeInvalidField, "since", "since: %.60q is not an RFC 3339 time", s)
		}
		q.history = true
	}
	return q, nil
}

type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sseWriter) record(rec audit.Record, dropped int64) error {
	m, err := recordMap(&rec)
	if err != nil {
		return err
	}
	return s.event(eventDecision, api.Event{Record: m, Dropped: dropped})
}

// historyRecord sends a kept record, marked as history.
func (s *sseWriter) historyRecord(rec audit.Record) error {
	m, err := recordMap(&rec)
	if err != nil {
		return err
	}
	return s.event(eventDecision, api.Event{Record: m, History: true})
}

func recordMap(rec *audit.Record) (map[string]any, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func (s *sseWriter) event(typ string, ev api.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return s.write(fmt.Sprintf("event: %s\ndata: %s\n\n", typ, b))
}

func (s *sseWriter) write(text string) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(frameWriteTimeout))
	if _, err := s.w.Write([]byte(text)); err != nil {
		return err
	}
	return s.rc.Flush()
}
