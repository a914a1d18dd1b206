package config

import "testing"

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestResolveUserDirs(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		env                    map[string]string
		pwHome                 string
		runtime, state, cfgDir string
		wantErr                bool
	}{
		{name: "xdg", env: map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "XDG_STATE_HOME": "/s", "XDG_CONFIG_HOME": "/c/", "HOME": "/h"},
			runtime: "/run/user/1000/airlock", state: "/s/airlock", cfgDir: "/c/airlock"},
		{name: "home only", env: map[string]string{"HOME": "/h"},
			runtime: "/run/user/1000/airlock", state: "/h/.local/state/airlock", cfgDir: "/h/.config/airlock"},
		{name: "relative xdg ignored", env: map[string]string{"XDG_RUNTIME_DIR": "run", "XDG_STATE_HOME": "s", "HOME": "/h"},
			runtime: "/run/user/1000/airlock", state: "/h/.local/state/airlock", cfgDir: "/h/.config/airlock"},
		{name: "password database home", env: map[string]string{}, pwHome: "/pw",
			runtime: "/run/user/1000/airlock", state: "/pw/.local/state/airlock", cfgDir: "/pw/.config/airlock"},
		{name: "no home", env: map[string]string{"HOME": "rel"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ResolveUserDirs(envOf(tc.env), 1000, tc.pwHome)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %+v, want an error", d)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Runtime != tc.runtime || d.State != tc.state || d.Config != tc.cfgDir {
				t.Fatalf("got %+v, want runtime %s state %s config %s", d, tc.runtime, tc.state, tc.cfgDir)
			}
			if got, want := d.Socket(), tc.runtime+"/airlock.sock"; got != want {
				t.Fatalf("socket: got %s, want %s", got, want)
			}
		})
	}
}

// TestApplyUser moves the system daemon's default paths into the user's
// directories and keeps the ones a file named.
func TestApplyUser(t *testing.T) {
	d := UserDirs{UID: 1000, Runtime: "/r/airlock", State: "/s/airlock", Config: "/c/airlock"}
	c := Default()
	c.ApplyUser(d)
	for _, tc := range []struct{ name, got, want string }{
		{"api.socket", c.API.Socket, "/r/airlock/airlock.sock"},
		{"api.group", c.API.Group, ""},
		{"audit.file", c.Audit.File, "/s/airlock/audit/audit.jsonl"},
		{"ca.cert", c.CA.Cert, "/c/airlock/ca.pem"},
		{"ca.key", c.CA.Key, "/c/airlock/ca.key"},
		{"metrics.listen", c.Metrics.Listen, DefaultUserMetricsListen},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	named := Default()
	named.Audit.File = "/mine/audit.jsonl"
	named.Metrics.Listen = "127.0.0.1:9999"
	named.ApplyUser(d)
	if named.Audit.File != "/mine/audit.jsonl" || named.Metrics.Listen != "127.0.0.1:9999" {
		t.Fatalf("named paths moved: audit %q metrics %q", named.Audit.File, named.Metrics.Listen)
	}
}
