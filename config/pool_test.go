package config

import (
	"strings"
	"testing"
)

func TestPoolMax(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    int
		wantErr string
	}{
		{"default", "", DefaultPoolMax, ""},
		{"default follows a larger pool_size", "sandbox: {pool_size: 12}\n", 12, ""},
		{"fixed pool", "sandbox: {pool_size: 4}\npool: {max: 4}\n", 4, ""},
		{"pool off", "sandbox: {pool_size: -1}\n", DefaultPoolMax, ""},
		{"below pool_size", "sandbox: {pool_size: 4}\npool: {max: 3}\n", 0, "pool.max: 3 is not between sandbox.pool_size (4) and 64"},
		{"above the bound", "pool: {max: 65}\n", 0, "pool.max: 65 is not between"},
		{"negative", "pool: {max: -1}\n", 0, "pool.max: -1 is not between"},
		{"unknown key", "pool: {min: 3}\n", 0, "min"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Decode(strings.NewReader(tt.yaml))
			if err == nil {
				err = c.Validate()
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want no error", err)
			}
			if c.Pool.Max != tt.want {
				t.Errorf("pool.max: got %d, want %d", c.Pool.Max, tt.want)
			}
		})
	}
}
