package clienttest

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// approvalState is the fake's held requests and follow streams.
type approvalState struct {
	pending []api.Approval
	answers []api.Approval
	subs    map[chan api.Approval]struct{}
}

// Ask adds a pending approval (what a held request would) and sends it to
// every follow stream.
func (s *Server) Ask(a api.Approval) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.State == "" {
		a.State = api.ApprovalPending
	}
	if a.AskedAt.IsZero() {
		a.AskedAt = time.Now().UTC()
		a.ExpiresAt = a.AskedAt.Add(time.Minute)
	}
	s.appr.pending = append(s.appr.pending, a)
	s.sendApproval(a)
}

// Answers returns every approval answered so far.
func (s *Server) Answers() []api.Approval {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.Approval(nil), s.appr.answers...)
}

// sendApproval sends a to the follow streams (s.mu held).
func (s *Server) sendApproval(a api.Approval) {
	for ch := range s.appr.subs {
		select {
		case ch <- a:
		default:
		}
	}
}

func (s *Server) approvals(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	list := append([]api.Approval{}, s.appr.pending...)
	s.mu.Unlock()
	if r.URL.Query().Get("follow") != "true" {
		writeJSON(w, 200, list)
		return
	}
	ch := make(chan api.Approval, 16)
	s.mu.Lock()
	if s.appr.subs == nil {
		s.appr.subs = map[chan api.Approval]struct{}{}
	}
	s.appr.subs[ch] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.appr.subs, ch)
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	for _, a := range list {
		enc.Encode(a)
	}
	rc.Flush()
	for {
		select {
		case a := <-ch:
			if enc.Encode(a) != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	var req api.ApprovalAnswer
	if e := decode(r, &req); e != nil {
		writeErr(w, e)
		return
	}
	state := api.ApprovalApproved
	switch req.Answer {
	case api.AnswerOnce, api.AnswerSandbox, api.AnswerPolicy:
	case api.AnswerDeny:
		state = api.ApprovalDenied
	default:
		writeErr(w, &api.Error{Code: api.CodeInvalidField, Field: "answer", Message: "answer: not one of once, sandbox, policy, deny"})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.appr.pending {
		if a.ID == r.PathValue("id") {
			s.appr.pending = append(s.appr.pending[:i], s.appr.pending[i+1:]...)
			a.State, a.Answer, a.By = state, req.Answer, "uid fake"
			s.appr.answers = append(s.appr.answers, a)
			s.sendApproval(a)
			writeJSON(w, 200, a)
			return
		}
	}
	writeErr(w, &api.Error{Code: api.CodeNotFound, Field: "id", Message: "no pending approval " + r.PathValue("id")})
}
