package netns

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/airlock-dev/airlock/oplog"
)

// state is what survives a crash, one JSON file per sandbox in StateDir.
type state struct {
	ID           string            `json:"id"`
	Labels       map[string]string `json:"labels,omitempty"`
	Backend      string            `json:"backend"`
	Attached     bool              `json:"attached,omitempty"`
	Source       string            `json:"source,omitempty"`
	SavedRules   string            `json:"saved_rules,omitempty"`
	SavedSysctls []sysctl          `json:"saved_sysctls,omitempty"`
	// AddedIsland says Attach added the island address and default route (the
	// namespace had no default route), so detaching removes them.
	AddedIsland bool `json:"added_island,omitempty"`
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
	return &st, nil
}

func (m *Manager) removeState(id string) {
	if err := os.Remove(m.statePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("remove state", oplog.SandboxKey, id, oplog.ErrorKey, err)
	}
}
