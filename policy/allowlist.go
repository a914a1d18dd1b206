package policy

import "github.com/airlock-dev/airlock/identity"

// NewAllowList parses one sandbox's own allow entries (identity.NewAllowList).
func NewAllowList(entries []string) (*AllowList, error) { return identity.NewAllowList(entries) }
