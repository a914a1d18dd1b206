package config

import "fmt"

// DefaultPoolMax is how far the daemon's warm pool may grow by default while
// creates come faster than it refills (sandbox.pool_size is kept when they
// are rare).
const DefaultPoolMax = 8

// Pool bounds how the daemon's warm pool sizes itself (daemon/pool.go): it
// keeps sandbox.pool_size sandboxes ready while creates are rare, grows
// toward Max while they come faster than a preparation takes, and shrinks
// back after a quiet minute.
type Pool struct {
	// Max is the most sandboxes the pool holds ready, between
	// sandbox.pool_size and MaxPoolSize. 0 means DefaultPoolMax, or
	// sandbox.pool_size when that is larger; equal to sandbox.pool_size, the
	// pool keeps that size.
	Max int `yaml:"max"`
}

func (p *Pool) applyDefaults(poolSize int) {
	if p.Max == 0 {
		p.Max = max(DefaultPoolMax, poolSize)
	}
}

func (p Pool) validate(poolSize int) error {
	if p.Max < max(poolSize, 1) || p.Max > MaxPoolSize {
		return fmt.Errorf("pool.max: %d is not between sandbox.pool_size (%d) and %d", p.Max, max(poolSize, 1), MaxPoolSize)
	}
	return nil
}
