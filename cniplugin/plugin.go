package cniplugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// SandboxIDPrefix starts every sandbox id airlock-cni derives.
const SandboxIDPrefix = "alk-pod-"

// Versions are the CNI spec versions the plugin speaks.
var Versions = version.PluginSupports("0.4.0", "1.0.0")

// CNI error codes of the plugin's own (the spec reserves 100 and up for
// plugins); the well-known ones come from package types.
const (
	// ErrAttach: the daemon refused or failed to attach the namespace.
	ErrAttach uint = 100
	// ErrNotInForce: CHECK found the namespace's rules changed, or the pod
	// not attached at all.
	ErrNotInForce uint = 101
	// ErrQuarantine: ADD failed and taking the pod's interfaces down failed
	// too.
	ErrQuarantine uint = 102
)

// SandboxID is the sandbox id of a container: deterministic, so DEL and
// CHECK find what ADD attached, and valid as an airlock sandbox id
// (SandboxIDPrefix and 20 hex digits of the container id's SHA-256).
func SandboxID(containerID string) string {
	sum := sha256.Sum256([]byte(containerID))
	return SandboxIDPrefix + hex.EncodeToString(sum[:10])
}

// Plugin runs ADD, DEL and CHECK. The zero value talks to the real daemon,
// writes results to os.Stdout and quarantines with Quarantine.
type Plugin struct {
	// Stdout receives ADD's result (os.Stdout when nil).
	Stdout io.Writer
	// Quarantine takes a namespace's interfaces down after a failed ADD
	// (the package's Quarantine when nil; tests record the call).
	Quarantine func(netnsPath string) error
	// NewClient makes the daemon's client (client.New when nil).
	NewClient func(socket string) *client.Client
}

func (p *Plugin) stdout() io.Writer {
	if p.Stdout != nil {
		return p.Stdout
	}
	return os.Stdout
}

func (p *Plugin) client(c *Config) *client.Client {
	if p.NewClient != nil {
		return p.NewClient(c.Socket)
	}
	return client.New(c.Socket, client.WithDialTimeout(c.timeout))
}

// load parses the configuration and CNI_ARGS of a call.
func load(args *skel.CmdArgs) (*Config, map[string]string, error) {
	c, err := ParseConfig(args.StdinData)
	if err != nil {
		return nil, nil, types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	kv, err := cniArgs(args.Args)
	if err != nil {
		return nil, nil, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	return c, kv, nil
}

// Add attaches a selected pod's namespace and prints the main plugin's
// result unchanged. A pod not selected is passed through without a call to
// the daemon. Any failure of ADD is an error (the pod does not start without
// airlock) and leaves every interface of the namespace down: a bad
// configuration, CNI_ARGS or prevResult (whether the pod would have been
// selected cannot be trusted then), a daemon that is unreachable, unhealthy
// or refuses, a timeout, a panic. The one deferred call below is the only
// place that quarantines, so no error path can skip it.
func (p *Plugin) Add(args *skel.CmdArgs) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = types.NewError(types.ErrInternal, fmt.Sprintf("airlock-cni: internal error: %v", r), "")
		}
		if err != nil {
			err = p.failClosed(args.Netns, err)
		}
	}()
	return p.add(args)
}

// add is ADD's work; Add quarantines on any error it returns.
func (p *Plugin) add(args *skel.CmdArgs) error {
	c, kv, err := load(args)
	if err != nil {
		return err
	}
	if c.RawPrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "airlock-cni: no prevResult: chain it after the main plugin (bridge, ptp, ...) in a conflist", "")
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "airlock-cni: prevResult: "+err.Error(), "")
	}
	res, err := c.PrevResult.GetAsVersion(c.CNIVersion)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, "airlock-cni: prevResult as "+c.CNIVersion+": "+err.Error(), "")
	}
	if c.Selected(kv) {
		if err := p.attach(c, kv, args); err != nil {
			return err
		}
	}
	return res.PrintTo(p.stdout())
}

func (p *Plugin) attach(c *Config, kv map[string]string, args *skel.CmdArgs) error {
	pod, err := c.Pod(kv)
	if err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	labels, err := c.Labels()
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	cl := p.client(c)
	defer cl.Close()
	id := SandboxID(args.ContainerID)
	// A daemon with a broken part (its state directory gone, the audit log
	// refusing records, no policy) must not be handed a pod: its attach
	// could fail later, or serve the pod without a record of what it did.
	// A failing warm pool is the one part an attach does not use.
	if h, err := cl.Health(ctx); err != nil && !onlyPoolFailing(h) {
		return daemonError("health before attaching "+id, c.Socket, err, ErrAttach)
	}
	err = cl.Attach(ctx, api.AttachRequest{ID: id, NetNS: args.Netns, Labels: labels, Pod: pod, Inbound: c.Inbound})
	if err != nil {
		return daemonError("attach "+id, c.Socket, err, ErrAttach)
	}
	return nil
}

// failClosed takes the namespace's interfaces down after a failed ADD, so a
// runtime that started the pod anyway would start it with no way out.
func (p *Plugin) failClosed(netnsPath string, err error) error {
	q := p.Quarantine
	if q == nil {
		q = Quarantine
	}
	if qerr := q(netnsPath); qerr != nil {
		return types.NewError(ErrQuarantine, fmt.Sprintf("%v; and the pod's interfaces could not be taken down: %v", errMsg(err), qerr), "")
	}
	return err
}

// Del detaches the pod's namespace. It succeeds when there is nothing to
// detach (never attached, already detached, namespace gone), and for a pod
// not selected also when the daemon is unreachable; a selected pod's DEL
// with the daemon down fails, so the runtime retries and the namespace
// airlock holds is not leaked.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	c, kv, err := load(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	cl := p.client(c)
	defer cl.Close()
	id := SandboxID(args.ContainerID)
	err = cl.Detach(ctx, id)
	switch {
	case err == nil, client.Code(err) == api.CodeNotFound:
		return nil
	case client.Code(err) == "" && !c.Selected(kv):
		return nil
	}
	return daemonError("detach "+id, c.Socket, err, ErrAttach)
}

// Check verifies that a selected pod is attached and its rules are in force.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	c, kv, err := load(args)
	if err != nil {
		return err
	}
	if !c.Selected(kv) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	cl := p.client(c)
	defer cl.Close()
	id := SandboxID(args.ContainerID)
	st, err := cl.CheckAttach(ctx, id)
	if client.Code(err) == api.CodeNotFound {
		return types.NewError(ErrNotInForce, fmt.Sprintf("airlock-cni: pod not attached to airlock (sandbox %s)", id), "")
	}
	if err != nil {
		return daemonError("check "+id, c.Socket, err, ErrNotInForce)
	}
	if !st.InForce {
		return types.NewError(ErrNotInForce, fmt.Sprintf("airlock-cni: sandbox %s: %s", id, st.Problem), "")
	}
	return nil
}

// daemonError turns a client error into a CNI error: an unreachable daemon
// is "try again later" (11), an answer of the daemon's is code.
func daemonError(what, socket string, err error, code uint) error {
	if client.Code(err) == "" {
		var te *types.Error
		if errors.As(err, &te) {
			return te
		}
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("airlock-cni: %s: the airlock daemon at %s is unreachable: %v (the pod gets no network without airlock)", what, socket, err), "")
	}
	return types.NewError(code, fmt.Sprintf("airlock-cni: %s: %v", what, err), "")
}

func errMsg(err error) string {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Msg
	}
	return err.Error()
}

// onlyPoolFailing reports whether h is a health answer whose failing parts
// are all the warm pool (an attach never takes from it).
func onlyPoolFailing(h *api.Health) bool {
	if h == nil {
		return false
	}
	failing := 0
	for _, p := range h.Parts {
		if p.Status != api.HealthOK {
			if p.Name != api.HealthPartPool {
				return false
			}
			failing++
		}
	}
	return failing > 0
}
