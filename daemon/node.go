package daemon

import (
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/config"
)

// NodeEnv is the environment variable audit.node defaults to: a DaemonSet
// sets it from the downward API (spec.nodeName).
const NodeEnv = "NODE_NAME"

// AuditNode is the node name every audit record carries: audit.node when
// set, else $NODE_NAME, else the host name. A name the writer would refuse
// is an error naming where it came from.
func AuditNode(cfg config.Config) (string, error) {
	return auditNode(cfg.Audit.Node, os.Getenv(NodeEnv), os.Hostname)
}

func auditNode(configured, env string, hostname func() (string, error)) (string, error) {
	switch {
	case configured != "":
		return configured, nil // config.Validate checked it
	case env != "":
		if !config.ValidNodeName(env) {
			return "", fmt.Errorf("audit.node: $%s %q is not a node name (at most 253 letters, digits, '-', '.' or '_'); set audit.node", NodeEnv, env)
		}
		return env, nil
	}
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("audit.node: not set, no $%s, and the host name: %w", NodeEnv, err)
	}
	if !config.ValidNodeName(h) {
		return "", fmt.Errorf("audit.node: not set, no $%s, and the host name %q is not a node name; set audit.node", NodeEnv, h)
	}
	return h, nil
}
