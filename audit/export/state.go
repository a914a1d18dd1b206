package export

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// StateSuffix is appended to the live audit file's name (and the sink's
// name) to name a sink's default state file.
const StateSuffix = ".export-state"

// state is a state file's content: the last position a collector
// acknowledged, and which sink it belongs to.
type state struct {
	Sink string `json:"sink"`
	Position
}

// loadState reads the position saved at path; a missing file is the start
// of the chain. A file saved for another sink is an error (two sinks must not
// share one position).
func loadState(path, sink string) (Position, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Position{}, nil
	}
	if err != nil {
		return Position{}, fmt.Errorf("export: state: %w", err)
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return Position{}, fmt.Errorf("export: state file %s is not valid (%v): move it aside to ship from the start of the log", path, err)
	}
	if s.Sink != sink {
		return Position{}, fmt.Errorf("export: state file %s belongs to sink %q, not %q", path, s.Sink, sink)
	}
	return s.Position, nil
}

// saveState writes pos to path atomically: a temporary file, fsync, rename,
// fsync of the directory. After it returns the position survives a crash.
func saveState(path, sink string, pos Position) error {
	b, err := json.Marshal(state{Sink: sink, Position: pos})
	if err != nil {
		return fmt.Errorf("export: state: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("export: state: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("export: state: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("export: state: %w", err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("export: state: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("export: state: sync directory: %w", err)
	}
	return nil
}
