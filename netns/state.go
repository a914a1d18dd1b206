package netns

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/oplog"
)

// Origins of a managed namespace (state.Origin).
const (
	// originCreated: the manager made the namespace (Create, CreateFrom) for
	// a sandbox it runs; it dies with that sandbox, so Recover removes it.
	originCreated = "created"
	// originAttached: someone else made it (Attach); it outlives the gateway,
	// so Recover re-attaches it (RecoverReattach) or restores and lets it go.
	originAttached = "attached"
)

// state is what survives a crash, one JSON file per sandbox in StateDir.
type state struct {
	ID      string            `json:"id"`
	Labels  map[string]string `json:"labels,omitempty"`
	Backend string            `json:"backend"`
	// Origin says who made the namespace: originCreated or originAttached.
	// A file written before the field existed has none; see origin.
	Origin string `json:"origin,omitempty"`
	// Mode and Allow are the sandbox's own policy mode and allow entries, so
	// a re-attached sandbox is decided as before the crash.
	Mode  identity.Mode `json:"mode,omitempty"`
	Allow []string      `json:"allow,omitempty"`
	// Pod is the Kubernetes pod an attached namespace belongs to (airlock-cni).
	Pod          *identity.Pod `json:"pod,omitempty"`
	Attached     bool          `json:"attached,omitempty"`
	Source       string        `json:"source,omitempty"`
	SavedRules   string        `json:"saved_rules,omitempty"`
	SavedSysctls []sysctl      `json:"saved_sysctls,omitempty"`
	// AddedIsland says Attach added the island address and default route (the
	// namespace had no default route), so detaching removes them.
	AddedIsland bool `json:"added_island,omitempty"`
	// Inbound is what the attached namespace's rules do with arriving
	// traffic, so Recover installs the same rules and CHECK verifies them. A
	// file written before the field existed has none: InboundCapture, the
	// only behaviour there was.
	Inbound *Inbound `json:"inbound,omitempty"`
	// Saved is set once SavedRules and SavedSysctls hold what an attached
	// namespace had; before that nothing in it was changed.
	Saved bool `json:"saved,omitempty"`
}

func (m *Manager) statePath(id string) string {
	return filepath.Join(m.cfg.StateDir, id+".json")
}

func (m *Manager) writeState(st *state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := m.statePath(st.ID) + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp, m.statePath(st.ID)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

func (m *Manager) readState(id string) (*state, error) {
	b, err := os.ReadFile(m.statePath(id))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state %s: %w", m.statePath(id), err)
	}
	if st.ID != id {
		return nil, fmt.Errorf("state %s: id %q does not match", m.statePath(id), st.ID)
	}
	if st.Backend != IPTablesNFT && st.Backend != IPTablesLegacy {
		return nil, fmt.Errorf("state %s: backend %q", m.statePath(id), st.Backend)
	}
	if _, err := st.origin(); err != nil {
		return nil, fmt.Errorf("state %s: %w", m.statePath(id), err)
	}
	if st.Inbound != nil {
		if err := st.Inbound.Validate(); err != nil {
			return nil, fmt.Errorf("state %s: %w", m.statePath(id), err)
		}
	}
	return &st, nil
}

// newState is the first state of a sandbox: who it is and who made its
// namespace.
func (m *Manager) newState(sb identity.Sandbox, origin string) *state {
	return &state{
		ID: sb.ID, Labels: maps.Clone(sb.Labels), Backend: m.backend, Origin: origin,
		Mode: sb.Mode, Allow: sb.Allow.Entries(), Attached: origin == originAttached, Pod: clonePod(sb.Pod),
	}
}

// origin says who made the namespace. A state file written before Origin
// existed is read by Attached, which Attach has always set in its very first
// state write, before it touched anything, and which nothing else ever set:
// without it the file was written by Create for a namespace Create made
// (named NamePrefix+id, bind-mounted under RunDir like every managed one).
// Origin and Attached that disagree make the file unusable: Recover then only
// removes the bind mount, so an attached namespace keeps its drop rules
// (closed) and a created one is gone.
func (st *state) origin() (string, error) {
	switch {
	case st.Origin == "" && st.Attached:
		return originAttached, nil
	case st.Origin == "":
		return originCreated, nil
	case st.Origin != originCreated && st.Origin != originAttached:
		return "", fmt.Errorf("origin %q is not %s or %s", st.Origin, originCreated, originAttached)
	case (st.Origin == originAttached) != st.Attached:
		return "", fmt.Errorf("origin %q disagrees with attached=%v", st.Origin, st.Attached)
	}
	return st.Origin, nil
}

// inbound is the Inbound an attached namespace was attached with.
func (st *state) inbound() Inbound {
	if st.Inbound == nil {
		return Inbound{Mode: InboundCapture}
	}
	return st.Inbound.normalized()
}

// sandbox is the policy identity a re-attached namespace is served with.
func (st *state) sandbox() (identity.Sandbox, error) {
	allow, err := identity.NewAllowList(st.Allow)
	if err != nil {
		return identity.Sandbox{}, err
	}
	return identity.Sandbox{ID: st.ID, Labels: maps.Clone(st.Labels), Mode: st.Mode, Allow: allow, Pod: clonePod(st.Pod)}, nil
}

func (m *Manager) removeState(id string) {
	if err := os.Remove(m.statePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("remove state", oplog.SandboxKey, id, oplog.ErrorKey, err)
	}
}

// clonePod copies p, so a state or a Sandbox never shares the caller's.
func clonePod(p *identity.Pod) *identity.Pod {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
