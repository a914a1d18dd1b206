package netns

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/oplog"
)

// fillPool keeps Config.PoolSize ready namespaces (rules installed, no listeners)
// named airlock-pool-<pid>-<n>. It runs until Close.
func (m *Manager) fillPool() {
	defer close(m.poolDone)
	for {
		select {
		case <-m.poolStop:
			return
		case <-m.poolKick:
		}
		for len(m.pool) < cap(m.pool) {
			select {
			case <-m.poolStop:
				return
			default:
			}
			if err := m.prepare(); err != nil {
				m.log.Error("pool", oplog.ErrorKey, err)
				break
			}
			path := filepath.Join(m.cfg.RunDir, fmt.Sprintf("%s%d-%d", poolPrefix, os.Getpid(), m.poolSeq.Add(1)))
			if err := m.makePooled(path); err != nil {
				m.log.Error("pool: make namespace", oplog.ErrorKey, err)
				break
			}
			m.poolNames.Store(path, struct{}{})
			m.pool <- path
		}
	}
}

func (m *Manager) makePooled(path string) error {
	h, err := newNamespace(path)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := m.setupIsland(context.Background(), h); err != nil {
		unmountRemove(path)
		return err
	}
	return nil
}

// claimPooled moves a ready pool namespace to path, if one is ready.
func (m *Manager) claimPooled(path string) bool {
	if m.pool == nil {
		return false
	}
	for {
		var p string
		select {
		case p = <-m.pool:
		default:
			return false
		}
		m.kickPool()
		m.poolNames.Delete(p)
		err := bindMount(p, path)
		unmountRemove(p)
		if err == nil {
			return true
		}
		m.log.Warn("pool: claim", oplog.PathKey, p, oplog.ErrorKey, err)
	}
}

func (m *Manager) kickPool() {
	select {
	case m.poolKick <- struct{}{}:
	default:
	}
}
