package hostname

// MaxNode bounds a node name (ValidNode).
const MaxNode = 253

// ValidNode reports whether name may name the machine an audit log belongs
// to (audit.node, the record's "node"): empty, or at most MaxNode bytes of
// ASCII letters, digits, '-', '.' and '_'. It is looser than a host name
// (Kubernetes node names and host names with '_' pass) and stricter than a
// label: nothing a log collector would have to escape. The one rule the
// config and the audit writer both apply.
func ValidNode(name string) bool {
	if len(name) > MaxNode {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}
