package config

import (
	"cmp"
	"fmt"
	"time"
)

// Limits defaults and bounds.
const (
	DefaultMemory       = 512 << 20
	DefaultCPUs         = 1.0
	DefaultPids         = 256
	DefaultTimeout      = 10 * time.Minute
	DefaultTmpSize      = 256 << 20
	DefaultNewFlows     = 500
	DefaultNewFlowBurst = 2000
	MaxNewFlows         = 100000
)

// Limits caps each sandbox.
type Limits struct {
	Memory  Size     `yaml:"memory"`
	CPUs    float64  `yaml:"cpus"`
	Pids    int      `yaml:"pids"`
	Timeout Duration `yaml:"timeout"`
	TmpSize Size     `yaml:"tmp_size"`
	// NewFlows is how many new flows (connections, datagrams to a new
	// destination) per second a sandbox may start, sustained, and NewFlowBurst
	// how many above that at once; past them a datagram to a new destination
	// fails with EPERM and a TCP connect waits for its SYN's retransmission.
	// They bound each sandbox's share of the host's connection-tracking table.
	NewFlows     int `yaml:"new_flows"`
	NewFlowBurst int `yaml:"new_flow_burst"`
}

func (l *Limits) applyDefaults() {
	l.Memory = cmp.Or(l.Memory, DefaultMemory)
	l.CPUs = cmp.Or(l.CPUs, DefaultCPUs)
	l.Pids = cmp.Or(l.Pids, DefaultPids)
	l.Timeout = cmp.Or(l.Timeout, Duration(DefaultTimeout))
	l.TmpSize = cmp.Or(l.TmpSize, DefaultTmpSize)
	l.NewFlows = cmp.Or(l.NewFlows, DefaultNewFlows)
	l.NewFlowBurst = cmp.Or(l.NewFlowBurst, DefaultNewFlowBurst)
}

// validate: defaults replace absent (zero) limits before it, so a zero here
// was asked for explicitly (--cpus 0, --pids 0, --timeout 0s, --tmp-size 0):
// it is an error, never a silent fallback to the default. NaN fails every
// comparison, so the cpus check is written to reject it too.
func (l *Limits) validate() error {
	if !(l.CPUs >= 0.01 && l.CPUs <= 1024) {
		return fmt.Errorf("limits.cpus: %v is not between 0.01 and 1024", l.CPUs)
	}
	if l.Pids < 1 {
		return fmt.Errorf("limits.pids: %d must be at least 1", l.Pids)
	}
	if l.Memory < 4<<20 {
		return fmt.Errorf("limits.memory: %s is below the 4M minimum", l.Memory)
	}
	if l.Timeout <= 0 {
		return fmt.Errorf("limits.timeout: %s must be positive", l.Timeout)
	}
	if l.TmpSize < 4096 {
		return fmt.Errorf("limits.tmp_size: %s is below the 4096-byte minimum", l.TmpSize)
	}
	if l.NewFlows < 1 || l.NewFlows > MaxNewFlows {
		return fmt.Errorf("limits.new_flows: %d is not between 1 and %d per second", l.NewFlows, MaxNewFlows)
	}
	if l.NewFlowBurst < 1 || l.NewFlowBurst > MaxNewFlows {
		return fmt.Errorf("limits.new_flow_burst: %d is not between 1 and %d", l.NewFlowBurst, MaxNewFlows)
	}
	return nil
}
