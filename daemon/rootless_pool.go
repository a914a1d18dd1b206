package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
)

// The warm pool of a per-user daemon. A rootless island is born with its
// sandbox's init, so a pooled sandbox's "namespace" is an islandSlot: the
// pool takes an empty one (TakePooled), the executor's Prepare has init
// build the island and hand its listeners' files to the slot (OnIsland),
// and a create adopts them under the sandbox's id (CreateFrom). Discarding
// the slot closes the files; the namespace itself ends with its init.

// rootlessNetwork is the network seam of a rootless daemon.
type rootlessNetwork struct{ netnsNetwork }

var (
	_ network   = rootlessNetwork{}
	_ pooledNet = (*islandSlot)(nil)
)

// TakePooled returns an empty slot for the island a pooled sandbox's init
// will build.
func (n rootlessNetwork) TakePooled(context.Context) (pooledNet, error) {
	spec, err := n.m.IslandSpec()
	if err != nil {
		return nil, err
	}
	return &islandSlot{spec: spec}, nil
}

// CreateFrom serves the island a pooled sandbox's init built; p is used up
// either way.
func (n rootlessNetwork) CreateFrom(ctx context.Context, sb policy.Sandbox, p pooledNet) (*netns.Sandbox, error) {
	slot, ok := p.(*islandSlot)
	if !ok {
		_ = p.Discard()
		return nil, fmt.Errorf("daemon: pooled namespace %T is not a rootless island", p)
	}
	files := slot.take()
	if files == nil {
		return nil, errIslandNotBuilt
	}
	return n.m.Adopt(ctx, sb, files)
}

// Create is never asked of a rootless daemon: buildRootless has the island
// made by the sandbox's init.
func (n rootlessNetwork) Create(context.Context, policy.Sandbox) (*netns.Sandbox, error) {
	return nil, errors.New("daemon: a rootless island is made by its sandbox's init, not beforehand")
}

var errIslandNotBuilt = errors.New("rootless island: its init has not handed over the listeners")

// islandSlot holds the files of one pooled rootless island until a create
// adopts them.
type islandSlot struct {
	spec  []byte
	mu    sync.Mutex
	files []*os.File
}

// Path is empty: nothing joins a rootless island but its own processes.
func (s *islandSlot) Path() string { return "" }

// Check fails once the files were taken or discarded, or before init built
// the island.
func (s *islandSlot) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		return errIslandNotBuilt
	}
	return nil
}

// Discard closes the files still held.
func (s *islandSlot) Discard() error {
	for _, f := range s.take() {
		f.Close()
	}
	return nil
}

// receive is the sandbox's OnIsland: the files init's island hook returned.
func (s *islandSlot) receive(files []*os.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files != nil {
		for _, f := range files {
			f.Close()
		}
		return errors.New("rootless island: handed over twice")
	}
	s.files = files
	return nil
}

func (s *islandSlot) take() []*os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files
	s.files = nil
	return f
}
