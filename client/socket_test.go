package client

import "testing"

// TestResolveSocket: the flag, then $AIRLOCK_SOCKET, then (not root) the
// user's own daemon when its socket exists, then the system daemon's.
func TestResolveSocket(t *testing.T) {
	const mine = "/run/user/1000/airlock/airlock.sock"
	for _, tc := range []struct {
		name     string
		flag     string
		env      map[string]string
		euid     int
		userSock bool
		want     string
	}{
		{name: "flag wins", flag: "/x.sock", env: map[string]string{SocketEnv: "/env.sock"}, euid: 1000, userSock: true, want: "/x.sock"},
		{name: "env", env: map[string]string{SocketEnv: "/env.sock"}, euid: 1000, userSock: true, want: "/env.sock"},
		{name: "user daemon running", euid: 1000, userSock: true, want: mine},
		{name: "xdg runtime dir", env: map[string]string{"XDG_RUNTIME_DIR": "/xdg"}, euid: 1000, userSock: true, want: "/xdg/airlock/airlock.sock"},
		{name: "no user daemon", euid: 1000, want: DefaultSocket},
		{name: "root never takes a user's socket", euid: 0, userSock: true, want: DefaultSocket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exists := func(p string) bool {
				return tc.userSock && (p == mine || p == "/xdg/airlock/airlock.sock")
			}
			got := resolveSocket(tc.flag, func(k string) string { return tc.env[k] }, tc.euid, exists)
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}
