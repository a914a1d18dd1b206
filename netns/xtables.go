package netns

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The island's tables without iptables-restore (backend legacy).
//
// Every island gets the same ruleset, and iptables-legacy-restore turns it
// into the same two kernel tables each time: for each of nat and filter one
// IPT_SO_SET_REPLACE of a blob of entries. Running it costs a process start
// with its extension libraries (2-5 ms of CPU) and takes the host-wide
// xtables lock, which serialises every island behind any iptables run on the
// host. So the second island of a Manager (not the first: a Manager that
// makes one island, an in-process airlock run, never pays for this) installs
// its rules with iptables-restore and proves them with Verify (the listing compared with
// render, rule by rule); its two tables are then read back from the kernel
// (IPT_SO_GET_INFO, IPT_SO_GET_ENTRIES) and kept as the template. Every later
// island gets the template's tables with one IPT_SO_SET_REPLACE each, and
// then reads them back and compares them with the template byte for byte (all
// but the packet counters and the kernel's chain bookkeeping): the island is
// served only with exactly the rules the verified one had. The kernel checks
// every entry on replace as it does for iptables-restore (the same
// translate_table), and a table holds no pointer a replay could carry across
// namespaces (a match's kernel data is cleared on the way out).
//
// Nothing else writes an island's tables, so no xtables lock is needed: the
// tables are the namespace's own, and the namespace is airlock's alone until
// its sandbox runs (without CAP_NET_ADMIN).

// Kernel ABI of the legacy IPv4 tables (linux/netfilter_ipv4/ip_tables.h),
// for 64-bit Linux.
const (
	iptSoSetReplace = 64 // IPT_SO_SET_REPLACE
	iptSoGetInfo    = 64 // IPT_SO_GET_INFO
	iptSoGetEntries = 65 // IPT_SO_GET_ENTRIES

	xtNameLen     = 32 // XT_TABLE_MAXNAMELEN
	numHooks      = 5  // NF_INET_NUMHOOKS
	getInfoSize   = 84 // sizeof(struct ipt_getinfo)
	getEntriesHdr = 40 // sizeof(struct ipt_get_entries)
	replaceHdr    = 96 // sizeof(struct ipt_replace)
	countersSize  = 16 // sizeof(struct xt_counters)

	// struct ipt_entry: the fields a walk and a comparison need.
	entrySize        = 112
	entryNextOffset  = 90 // __u16 next_offset
	entryComefrom    = 92 // unsigned int comefrom (the kernel's bookkeeping)
	entryCounters    = 96 // struct xt_counters
	entryMaxEntries  = 1 << 12
	tableMaxBlobSize = 1 << 20
)

// xtTable is one table as the kernel holds it.
type xtTable struct {
	name       string
	validHooks uint32
	hookEntry  [numHooks]uint32
	underflow  [numHooks]uint32
	numEntries uint32
	// entries is the blob, with counters and comefrom zeroed.
	entries []byte
}

// islandTables are the island's two tables, read from an island whose rules
// iptables-restore installed and Verify proved.
type islandTables struct{ nat, filter xtTable }

// differs says how t differs from want ("" when it does not).
func (t xtTable) differs(want xtTable) string {
	switch {
	case t.validHooks != want.validHooks:
		return fmt.Sprintf("hooks %#x, want %#x", t.validHooks, want.validHooks)
	case t.numEntries != want.numEntries:
		return fmt.Sprintf("%d entries, want %d", t.numEntries, want.numEntries)
	case t.hookEntry != want.hookEntry || t.underflow != want.underflow:
		return "chains start at other offsets"
	case !bytes.Equal(t.entries, want.entries):
		return "entries differ"
	}
	return ""
}

// readIslandTables reads nat and filter from the namespace ns.
func readIslandTables(ns vnetns.NsHandle) (*islandTables, error) {
	var t islandTables
	err := inNS(ns, func() error {
		fd, err := rawSocket()
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if t.nat, err = readTable(fd, "nat"); err != nil {
			return err
		}
		t.filter, err = readTable(fd, "filter")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the island's tables: %w", err)
	}
	return &t, nil
}

// loadIslandTables replaces nat and filter in the fresh namespace ns with
// t's, then reads both back and fails unless they are t's exactly.
func loadIslandTables(ns vnetns.NsHandle, t *islandTables) error {
	if err := inNS(ns, func() error { return loadTablesHere(t) }); err != nil {
		return fmt.Errorf("load the island's tables: %w", err)
	}
	return nil
}

// loadTablesHere is loadIslandTables in the calling thread's namespace.
func loadTablesHere(t *islandTables) error {
	fd, err := rawSocket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, want := range []xtTable{t.nat, t.filter} {
		if err := replaceTable(fd, want); err != nil {
			return err
		}
	}
	for _, want := range []xtTable{t.nat, t.filter} {
		got, err := readTable(fd, want.name)
		if err != nil {
			return err
		}
		if d := got.differs(want); d != "" {
			return fmt.Errorf("rules not in force: table %s read back with %s", want.name, d)
		}
	}
	return nil
}

// rawSocket is the socket the table calls go through; its namespace is the
// calling thread's.
func rawSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return -1, fmt.Errorf("raw socket: %w", err)
	}
	return fd, nil
}

func getsockopt(fd, opt int, buf []byte) error {
	n := uint32(len(buf))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_IP, uintptr(opt),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return e
	}
	if int(n) != len(buf) {
		return fmt.Errorf("short answer: %d of %d bytes", n, len(buf))
	}
	return nil
}

func tableName(name string) ([xtNameLen]byte, error) {
	var b [xtNameLen]byte
	if len(name) >= xtNameLen {
		return b, fmt.Errorf("table name %q too long", name)
	}
	copy(b[:], name)
	return b, nil
}

// tableInfo asks for a table's header (IPT_SO_GET_INFO); the kernel makes
// the table in the namespace on first use.
func tableInfo(fd int, name string) (xtTable, error) {
	t := xtTable{name: name}
	nb, err := tableName(name)
	if err != nil {
		return t, err
	}
	buf := make([]byte, getInfoSize)
	copy(buf, nb[:])
	if err := getsockopt(fd, iptSoGetInfo, buf); err != nil {
		return t, fmt.Errorf("table %s: info: %w", name, err)
	}
	le := binary.LittleEndian
	t.validHooks = le.Uint32(buf[32:])
	for i := range numHooks {
		t.hookEntry[i] = le.Uint32(buf[36+4*i:])
		t.underflow[i] = le.Uint32(buf[56+4*i:])
	}
	t.numEntries = le.Uint32(buf[76:])
	size := le.Uint32(buf[80:])
	if size > tableMaxBlobSize || t.numEntries > entryMaxEntries {
		return t, fmt.Errorf("table %s: %d entries in %d bytes, past what an island holds", name, t.numEntries, size)
	}
	t.entries = make([]byte, size)
	return t, nil
}

// readTable reads a whole table (IPT_SO_GET_ENTRIES), counters and comefrom
// zeroed.
func readTable(fd int, name string) (xtTable, error) {
	t, err := tableInfo(fd, name)
	if err != nil {
		return t, err
	}
	buf := make([]byte, getEntriesHdr+len(t.entries))
	copy(buf, name)
	binary.LittleEndian.PutUint32(buf[32:], uint32(len(t.entries)))
	if err := getsockopt(fd, iptSoGetEntries, buf); err != nil {
		return t, fmt.Errorf("table %s: entries: %w", name, err)
	}
	t.entries = buf[getEntriesHdr:]
	if err := zeroBookkeeping(t.entries, t.numEntries); err != nil {
		return t, fmt.Errorf("table %s: %w", name, err)
	}
	return t, nil
}

// zeroBookkeeping walks n entries of blob and zeroes what the kernel keeps
// per table rather than per rule: packet counters and comefrom.
func zeroBookkeeping(blob []byte, n uint32) error {
	off := 0
	for i := uint32(0); i < n; i++ {
		if off+entrySize > len(blob) {
			return fmt.Errorf("entry %d runs past the table", i)
		}
		next := int(binary.LittleEndian.Uint16(blob[off+entryNextOffset:]))
		if next < entrySize || off+next > len(blob) {
			return fmt.Errorf("entry %d has a bad size %d", i, next)
		}
		clear(blob[off+entryComefrom : off+entryCounters+countersSize])
		off += next
	}
	if off != len(blob) {
		return errors.New("entries do not fill the table")
	}
	return nil
}

// replaceTable puts t in place of the namespace's table of that name
// (IPT_SO_SET_REPLACE, what iptables-restore does last).
func replaceTable(fd int, t xtTable) error {
	cur, err := tableInfo(fd, t.name)
	if err != nil {
		return err
	}
	if cur.validHooks != t.validHooks {
		return fmt.Errorf("table %s: hooks %#x, want %#x", t.name, cur.validHooks, t.validHooks)
	}
	nb, err := tableName(t.name)
	if err != nil {
		return err
	}
	// The kernel hands the old table's counters back here.
	counters := make([]byte, max(cur.numEntries, 1)*countersSize)
	buf := make([]byte, replaceHdr+len(t.entries))
	le := binary.LittleEndian
	copy(buf, nb[:])
	le.PutUint32(buf[32:], t.validHooks)
	le.PutUint32(buf[36:], t.numEntries)
	le.PutUint32(buf[40:], uint32(len(t.entries)))
	for i := range numHooks {
		le.PutUint32(buf[44+4*i:], t.hookEntry[i])
		le.PutUint32(buf[64+4*i:], t.underflow[i])
	}
	le.PutUint32(buf[84:], cur.numEntries)
	le.PutUint64(buf[88:], uint64(uintptr(unsafe.Pointer(&counters[0]))))
	copy(buf[replaceHdr:], t.entries)
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_IP, iptSoSetReplace,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0)
	runtime.KeepAlive(counters)
	if e != 0 {
		return fmt.Errorf("table %s: replace: %w", t.name, e)
	}
	return nil
}
