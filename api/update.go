package api

// UpdateSandboxRequest is PATCH /v1/sandboxes/{id}: a change to one running
// sandbox's own rules. A field left out is left as it is; the others apply
// in this order: Allow replaces the list, AllowRemove removes entries,
// AllowAdd adds them. The answer is the sandbox as it is after the change
// (Sandbox).
type UpdateSandboxRequest struct {
	// Allow, when present, replaces the sandbox's allow list ([] empties
	// it). Entries are checked as at create (CreateSandboxRequest.Allow).
	Allow *[]string `json:"allow,omitempty"`
	// AllowAdd adds entries (one already listed is kept once).
	AllowAdd []string `json:"allow_add,omitempty"`
	// AllowRemove removes entries, each spelled as listed; one that is not
	// listed is refused naming it.
	AllowRemove []string `json:"allow_remove,omitempty"`
	// Labels sets each key to its value; a null value removes the key.
	Labels map[string]*string `json:"labels,omitempty"`
	// Mode is "enforce" or "report" (root only); empty leaves it.
	Mode string `json:"mode,omitempty"`
}

// Empty reports whether the request changes nothing.
func (r *UpdateSandboxRequest) Empty() bool {
	return r.Allow == nil && len(r.AllowAdd) == 0 && len(r.AllowRemove) == 0 && len(r.Labels) == 0 && r.Mode == ""
}
