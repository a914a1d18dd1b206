package sandboxd

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A slot is what a sandbox needs before it can start: a unique id, a cgroup named
// airlock-<id> and a uid no other live sandbox on the host holds. Uniqueness across
// processes comes from flock()ed files in Config.StateDir: the lock dies with its
// holder, so a crashed executor's slots are reclaimable at once. A slot is used by
// exactly one run and destroyed after it; the pool only makes them ahead of time.
type slot struct {
	id      string
	uid     int
	cg      *cgroup
	idLock  *os.File
	uidLock *os.File
}

type pool struct {
	cfg  *Config
	cgm  *cgroupManager
	mu   sync.Mutex
	next int // next uid offset to try
	// idmaps, when set (root executors), has the refill make each new
	// slot's workspace idmapping ahead (idmapCache.warm).
	idmaps *idmapCache
	fill   chan struct{}
	idle   chan *slot
	done   chan struct{}
	wg     sync.WaitGroup
}

func newPool(cfg *Config, cgm *cgroupManager) (*pool, error) {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("sandboxd: state_dir %s: %w", cfg.StateDir, err)
	}
	size := cfg.PoolSize
	if size < 0 {
		size = 0
	}
	p := &pool{cfg: cfg, cgm: cgm, idle: make(chan *slot, size), fill: make(chan struct{}, 1), done: make(chan struct{})}
	p.reapStale()
	if size > 0 {
		p.wg.Add(1)
		go p.refill()
		p.fill <- struct{}{}
	}
	return p, nil
}

// reapStale removes cgroups whose owner is gone (their id lock can be taken).
func (p *pool) reapStale() {
	for _, name := range p.cgm.list() {
		id := strings.TrimPrefix(name, "airlock-")
		lf, err := tryLock(filepath.Join(p.cfg.StateDir, "id-"+id+".lock"))
		if err != nil {
			continue // held: a live sandbox
		}
		cg := p.cgm.open(name)
		_ = cg.kill()
		_ = cg.remove()
		_ = os.Remove(lf.Name())
		lf.Close()
	}
}

func (p *pool) refill() {
	defer p.wg.Done()
	for {
		select {
		case <-p.done:
			return
		case <-p.fill:
		}
		for len(p.idle) < cap(p.idle) {
			s, err := p.make()
			if err != nil {
				break // the next get makes one synchronously and reports the error
			}
			p.mu.Lock()
			idmaps := p.idmaps
			p.mu.Unlock()
			if idmaps != nil {
				idmaps.warm(s.uid)
			}
			select {
			case p.idle <- s:
			case <-p.done:
				s.destroy()
				return
			}
		}
	}
}

// get returns a ready slot, making one now when the pool is empty.
func (p *pool) get() (*slot, error) {
	select {
	case s := <-p.idle:
		select {
		case p.fill <- struct{}{}:
		default:
		}
		return s, nil
	default:
	}
	return p.make()
}

func (p *pool) make() (*slot, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(b[:])
	s := &slot{id: id}
	var err error
	if s.idLock, err = tryLock(filepath.Join(p.cfg.StateDir, "id-"+id+".lock")); err != nil {
		return nil, fmt.Errorf("sandboxd: lock slot %s: %w", id, err)
	}
	if err := p.takeUID(s); err != nil {
		s.destroy()
		return nil, err
	}
	if s.cg, err = p.cgm.create("airlock-" + id); err != nil {
		s.destroy()
		return nil, err
	}
	return s, nil
}

func (p *pool) takeUID(s *slot) error {
	if r := p.cfg.Rootless; r != nil {
		s.uid = r.sandboxUID() // inside its own user namespace: no other sandbox shares it
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < p.cfg.UIDCount; i++ {
		off := (p.next + i) % p.cfg.UIDCount
		uid := p.cfg.UIDBase + off
		f, err := tryLock(filepath.Join(p.cfg.StateDir, "uid-"+strconv.Itoa(uid)+".lock"))
		if err != nil {
			continue
		}
		s.uid, s.uidLock = uid, f
		p.next = off + 1
		return nil
	}
	return fmt.Errorf("sandboxd: all %d uids from uid_base %d are in use", p.cfg.UIDCount, p.cfg.UIDBase)
}

// destroy removes the cgroup and releases the locks. The cgroup must be empty: when
// it cannot be removed (a process may still hold the uid), both locks stay held for
// the life of this process, so the uid is never handed to another sandbox while
// something of this one may live, and reapStale does not touch it.
func (s *slot) destroy() error {
	if s.cg != nil {
		if err := s.cg.remove(); err != nil {
			return fmt.Errorf("%w (uid %d and slot %s stay reserved)", err, s.uid, s.id)
		}
	}
	if s.idLock != nil {
		_ = os.Remove(s.idLock.Name())
		s.idLock.Close()
	}
	if s.uidLock != nil {
		s.uidLock.Close()
	}
	return nil
}

func (p *pool) close() error {
	close(p.done)
	p.wg.Wait()
	var errs []error
	for {
		select {
		case s := <-p.idle:
			errs = append(errs, s.destroy())
		default:
			return errors.Join(errs...)
		}
	}
}

// tryLock opens (creating) path and takes an exclusive non-blocking flock on it.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
