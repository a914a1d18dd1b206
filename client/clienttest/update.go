package clienttest

import (
	"net/http"
	"slices"

	"github.com/airlock-dev/airlock/api"
)

// update is PATCH /v1/sandboxes/{id}: the request applied as the daemon
// applies it (allow replaced, then removed from, then added to; labels set
// or removed by null; mode set), with no checks of the entries themselves.
func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	var req api.UpdateSandboxRequest
	if e := decode(r, &req); e != nil {
		writeErr(w, e)
		return
	}
	if req.Empty() {
		writeErr(w, &api.Error{Code: api.CodeInvalidField, Message: "nothing to change"})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	allow := slices.Clone(sb.Allow)
	if req.Allow != nil {
		allow = slices.Clone(*req.Allow)
	}
	for i, a := range req.AllowRemove {
		j := slices.Index(allow, a)
		if j < 0 {
			writeErr(w, &api.Error{Code: api.CodeInvalidField, Field: "allow_remove[" + itoa(i) + "]", Message: a + " is not in the allow list"})
			return
		}
		allow = slices.Delete(allow, j, j+1)
	}
	for _, a := range req.AllowAdd {
		if !slices.Contains(allow, a) {
			allow = append(allow, a)
		}
	}
	labels := map[string]string{}
	for k, v := range sb.Labels {
		labels[k] = v
	}
	for k, v := range req.Labels {
		if v == nil {
			delete(labels, k)
		} else {
			labels[k] = *v
		}
	}
	sb.Allow, sb.Labels = allow, labels
	if req.Mode != "" {
		sb.Mode = req.Mode
	}
	s.updates = append(s.updates, req)
	writeJSON(w, 200, sb.view())
}

// Updates returns every PATCH accepted so far.
func (s *Server) Updates() []api.UpdateSandboxRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.UpdateSandboxRequest(nil), s.updates...)
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
